"""The release: a plan of the built wheels (``plan``), the folder it writes (``assembly``, ``manifest``, ``index``),
its checks in clean environments (``install_checks``, ``install_lines`` with ``pypi_view``, ``import_steps``,
``rehearsal``), the sdist (``sdist``), what a wheelhouse or site holds (``coverage``) and what ``dispatch.yml`` runs
(``dispatch``).
"""
