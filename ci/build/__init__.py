"""What every build shares, whatever the platform: the project's source and its copy (``project_source``), the
tail that repairs, audits and publishes a wheel (``tail``), and the build report (``report``).

The host and container builds (``ci/linux/``) and the Windows build (``windows/build.py``) call these; nothing here
knows a platform.
"""
