#!/bin/sh
# A free-threaded CPython (--disable-gil) for the builder image, built from Debian's own source package: what
# ci/toolchain/free_threaded.py makes on a host, with the same source, patches and flags (handed in by
# ci/linux/images.py as build arguments, never written here). It runs in a stage of its own
# (docker/Dockerfile: the free-threaded stage): its build tools stay out of the image, whose layer is the
# interpreter alone, copied to /opt/python/<tag>, the folder name manylinux uses (cp313-cp313t).
#
#   free-threaded-python.sh OUT "PACKAGE SUITE UPSTREAM" "SKIPPED PATCHES" "CONFIGURE FLAGS"
#
# OUT receives <tag>/ (configured for --prefix=/opt/python/<tag>). A base that has the interpreter already
# (manylinux's /opt/python/cp313-cp313t) or no apt gets nothing: OUT stays empty.
set -eu

out=${1:?usage: free-threaded-python.sh OUT SOURCE SKIPPED FLAGS}
source=${2:?}
skipped=${3-}
flags=${4-}
# shellcheck disable=SC2086 # "PACKAGE SUITE UPSTREAM": split on purpose
set -- $source
package=${1:?}; suite=${2:?}; upstream=${3:?}
minor=${upstream%.*}
tag="cp$(echo "$minor" | tr -d .)"
tag="$tag-${tag}t"
prefix=/opt/python/$tag
mkdir -p "$out"

if [ -x "$prefix/bin/python" ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "free-threaded-python: the base has $prefix already (or no apt): nothing to build"
  exit 0
fi

mirror=$(awk '$1 == "deb" { print $2; exit }' /etc/apt/sources.list)
echo "deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror $suite main" \
  > /etc/apt/sources.list.d/farm-free-threaded-src.list
apt-get update
# The headers of what pip and the builds import (ssl, zlib, ctypes, bz2, lzma); Debian's python3 brings their
# libraries into the image itself.
apt-get install -y --no-install-recommends dpkg-dev patch make gcc libc6-dev libssl-dev zlib1g-dev libffi-dev \
  libbz2-dev liblzma-dev xz-utils

work=$(mktemp -d)
cd "$work"
apt-get source --download-only "$package"
dsc=$(ls "${package}"_*.dsc)
version=${dsc#"${package}_"}
version=${version%.dsc}
if [ "${version%%-*}" != "$upstream" ]; then
  echo "free-threaded-python: Debian's $suite now has $package $version, not the pinned $upstream:" \
    "update SOURCES in ci/toolchain/free_threaded.py" >&2
  exit 1
fi
# apt checked the files against the suite's signed Sources index, as `apt-get source` does.
dpkg-source --no-check --skip-patches -x "$dsc" tree
cd tree
grep -v '^#' debian/patches/series | while read -r patch _; do
  [ -n "$patch" ] || continue
  case " $skipped " in *" $patch "*) echo "free-threaded-python: $patch left out"; continue;; esac
  patch -p1 --batch --forward --silent -i "debian/patches/$patch"
done
# shellcheck disable=SC2086
./configure --prefix="$prefix" $flags > "$work/configure.log"
make -j"$(nproc)" > "$work/make.log" 2>&1 || { tail -n 50 "$work/make.log" >&2; exit 1; }
make install > "$work/install.log" 2>&1 || { tail -n 50 "$work/install.log" >&2; exit 1; }
rm -rf "$prefix/lib/python${minor}t/test"  # CPython's own test suite: 140 MB nothing of the farm runs
"$prefix/bin/python${minor}t" -c "import sys, sysconfig, ssl, zlib, ctypes, bz2, lzma, pip
assert sysconfig.get_config_var('Py_GIL_DISABLED') == 1 and not sys._is_gil_enabled(), 'not free-threaded'
print(sys.version)"
ln -s "python${minor}t" "$prefix/bin/python"
# manylinux's /opt/python/*/bin have pip too: cibuildwheel puts the folder first on PATH and requires `which pip` to
# be its interpreter's (ensurepip wrote pip3 and pip3.13 only; without it the base's python3 pip answers).
[ -e "$prefix/bin/pip" ] || ln -s "pip${minor%%.*}" "$prefix/bin/pip"
mv "$prefix" "$out/$tag"
echo "free-threaded-python: $package $version built into $prefix"
cd /
rm -rf "$work" /etc/apt/sources.list.d/farm-free-threaded-src.list
