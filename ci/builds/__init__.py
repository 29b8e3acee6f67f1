"""What every build shares, on every OS and in every container: the project's source as the build sees it
(``project_source``: files, links, submodules, the copy), what the source alone refuses before anything is
installed (``preflight``: a folder nothing in it compiles, a stable-ABI project's classic sources, links,
submodules, the C++ standard of ``standard``, read from the files the backend uses, ``backend_files``, under their
``conditions``), why a failed build failed (``failure``; a build that compiled nothing, ``failure/pure.py``), where
builds write and the tail every build ends with (``tail``: staging, a wheel with no compiled library refused,
repair, final metadata, audit, atomic move) and the report it leaves (``report``).
"""
