#!/bin/sh
# Give the build user the interpreters cibuildwheel drives (/opt/python/<tag>), so that it can pip-install its
# build frontend and write the torch volume's .pth into site-packages.
#
#   own-python.sh USER [TAG ...]      (no TAG: every /opt/python/* entry)
#
# In manylinux /opt/python/cp312-cp312 is a symlink into /opt/_internal/cpython-3.12.x: `chown -R` of the link
# changes the link alone (-R does not follow a symlink it is given), so the real folder is resolved first and
# everything under it changed. On the Debian base /opt/python/<tag> is a real venv and this is the same chown -R
# as before. Every tag is done, not only the image's own: cibuildwheel builds a non-abi3 target with the
# target's CPython, which on manylinux is another of these folders. Each real folder is done once (cp39-cp39
# may be a link to the image's own Python).
set -eu

user=${1:?usage: own-python.sh USER [TAG ...]}
shift
if [ "$#" -eq 0 ]; then
  set -- $(ls /opt/python)
fi

done_dirs=' '
for tag; do
  real=$(readlink -f "/opt/python/$tag")
  if [ ! -d "$real" ]; then
    echo "own-python: /opt/python/$tag is not a folder (it resolves to $real): fix the base's Python layout" >&2
    exit 1
  fi
  case "$done_dirs" in *" $real "*) continue;; esac
  chown -R "$user:$user" "$real"
  done_dirs="$done_dirs$real "
  echo "own-python: /opt/python/$tag -> $real is $user's"
done
