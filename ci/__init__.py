"""The farm's own code: matrix, hermetic toolkits, builds, audits and reports.

Entry point: ``python -m ci <command>`` (see ``ci/__main__.py``); ``noxfile.py``
sessions are thin wrappers around these commands.
"""
