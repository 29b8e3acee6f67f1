"""What every build shares, on every OS and in every container: the project's source as the build sees it
(``project_source``: files, links, submodules, the copy), what the source alone refuses before anything is
installed (``preflight``: links, submodules, the C++ standard of ``standard``, read from the files the backend
uses, ``backend_files``, under their ``conditions``), why a failed build failed (``failure``), where builds write and
the tail every build ends with (``tail``: staging, repair, final metadata, audit, atomic move) and the report it
leaves (``report``).
"""
