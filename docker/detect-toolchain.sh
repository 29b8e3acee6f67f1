#!/bin/sh
# Find the cell's host compiler where the base image keeps it and record the paths for ci/linux/container.py.
#
#   detect-toolchain.sh gcc-<major> [ENV_FILE]      (default ENV_FILE: /etc/farm/toolchain.env)
#
# Bases differ: Debian installs gcc-12 as /usr/bin/gcc-12 (with ccache's /usr/lib/ccache/g++-12), manylinux
# (AlmaLinux) keeps it under /opt/rh/gcc-toolset-12/root/usr/bin/ with no versioned name on PATH and ccache's
# links (if any) for unversioned names only. Guessing `gcc-12` from the cell broke the manylinux build, so the
# image looks once, at build time, and writes what it found (KEY=value lines, read by ci/linux/images.py):
#
#   FARM_CC           the C compiler (also nvcc's -ccbin through torch)
#   FARM_CXX          the C++ compiler the build calls: a ccache front for FARM_CXX_REAL
#   FARM_CXX_REAL     the C++ compiler itself
#   FARM_GCC_VERSION  its full version (checked against the cell's major)
#
# POSIX sh: Debian's minbase has dash only. Stops (exit 1) with one line naming what the base has instead.
set -eu

compiler=${1:?usage: detect-toolchain.sh gcc-<major> [ENV_FILE]}
out=${2:-/etc/farm/toolchain.env}
major=${compiler#gcc-}
case "$compiler" in gcc-*) ;; *) major=;; esac
case "$major" in
  '' | *[!0-9]*) echo "detect-toolchain: the host compiler must read gcc-<major> ($compiler)" >&2; exit 2;;
esac

toolset=/opt/rh/gcc-toolset-$major/root/usr/bin
if [ -x "$toolset/gcc" ] && [ -x "$toolset/g++" ]; then
  cc=$toolset/gcc cxx=$toolset/g++
elif cc=$(command -v "gcc-$major") && cxx=$(command -v "g++-$major"); then
  :
else
  have=$(ls -d /opt/rh/gcc-toolset-* 2>/dev/null | tr '\n' ' ')$(command -v gcc g++ 2>/dev/null | tr '\n' ' ')
  echo "detect-toolchain: no $compiler in this base (looked for $toolset/g++ and g++-$major on PATH;" \
       "it has: ${have:-no gcc}): install it with the base's OS packages or change the cell's host_compiler" >&2
  exit 1
fi

# A toolset or alternative of another major under the expected name would build with the wrong ABI floor.
version=$("$cc" -dumpfullversion 2>/dev/null || "$cc" -dumpversion)
if [ "${version%%.*}" != "$major" ]; then
  echo "detect-toolchain: $cc is gcc $version, not $compiler: fix the base's compiler packages" >&2
  exit 1
fi

ccache=$(command -v ccache) || { echo "detect-toolchain: ccache is not installed: add it to the OS packages" >&2; exit 1; }

# The C++ compiler goes through ccache. A masquerade link (Debian's /usr/lib/ccache/g++-12) is used only when
# ccache, which runs the first compiler of that name on PATH, would find this very compiler: manylinux's
# /usr/lib64/ccache/g++ would run whichever toolset is first on PATH. Otherwise a two-line front names it.
name=${cxx##*/}
front=
for dir in /usr/lib/ccache /usr/lib64/ccache /usr/local/lib/ccache; do
  if [ -e "$dir/$name" ] && [ "$(command -v "$name" || true)" = "$cxx" ]; then
    front=$dir/$name
    break
  fi
done
if [ -z "$front" ]; then
  front=/usr/local/libexec/farm-ccache/$name
  mkdir -p "${front%/*}"
  printf '#!/bin/sh\nexec %s %s "$@"\n' "$ccache" "$cxx" > "$front"
  chmod 755 "$front"
fi

mkdir -p "$(dirname "$out")"
printf 'FARM_CC=%s\nFARM_CXX=%s\nFARM_CXX_REAL=%s\nFARM_GCC_VERSION=%s\n' "$cc" "$front" "$cxx" "$version" > "$out"
echo "detect-toolchain: wrote $out:" && sed 's/^/  /' "$out"
