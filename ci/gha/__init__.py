"""The GitHub Actions workflows of a project, rendered from the matrix: the jobs (``jobs``, ``windows_jobs``,
``dispatch_jobs``) built from ``steps``, the pinned third-party actions (``actions``), a deterministic YAML writer
(``yamlout``), and the render/check/lint commands' logic (``workflows``).
"""
