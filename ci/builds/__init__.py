"""What every build shares, on every OS and in every container: the project's source as the build sees it
(``project_source``), where builds write and the tail every build ends with (``tail``: staging, repair, final
metadata, audit, atomic move) and the report it leaves (``report``).
"""
