"""The farm's side of the compile front's admission and measurement (``ci/nvcc/admission/`` is the wrapper's):
the records of earlier builds kept in the farm's cache per project and source (``records``), the jobs and nvcc
``--threads`` a build runs with, chosen from cores, memory and those records (``plan``), and the live line of a
build's compiles with its ETA and the slowest compiles at the end (``watch``).
"""
