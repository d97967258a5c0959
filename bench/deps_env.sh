# shellcheck shell=bash
# deps_env.sh: points a build at the Debian dependencies unpacked under $PE_DEPS_ROOT
# (made by bench/fetch_deps.sh), with that one variable. Source it:
#
#   PE_DEPS_ROOT=$PWD/.deps . bench/deps_env.sh
#   cmake -S . -B build && cmake --build build
#
# It unpacks $PE_DEPS_ROOT/debs/*.deb into $PE_DEPS_ROOT/root if that is missing or was
# unpacked elsewhere (dpkg-deb, or python3 where dpkg is absent), points the unpacked .pc
# files' /usr paths into the folder, then exports:
#   PKG_CONFIG              the unpacked pkgconf (CMake's FindPkgConfig honours it)
#   PATH                    + its folder, so `pkg-config` exists where the machine has none
#   PKG_CONFIG_LIBDIR       only the unpacked .pc files
#   CMAKE_PREFIX_PATH       $PE_DEPS_ROOT/root/usr first
#   CPATH                   the unpacked multiarch headers (usr/include/<arch>)
#   LD_LIBRARY_PATH         the unpacked libraries (and fallbacks the machine lacks)
# Built binaries also carry the library folders in their RUNPATH (CMake's build tree).

pe_deps_unpack() { # DEB DEST
  if command -v dpkg-deb >/dev/null 2>&1; then
    dpkg-deb -x "$1" "$2"
  elif command -v python3 >/dev/null 2>&1; then
    python3 - "$1" "$2" <<'PY'
import io, sys, tarfile
deb, dest = sys.argv[1], sys.argv[2]
data = open(deb, "rb").read()
assert data[:8] == b"!<arch>\n", deb + ": not an ar archive"
pos = 8
while pos + 60 <= len(data):
    name = data[pos:pos + 16].decode().strip().rstrip("/")
    size = int(data[pos + 48:pos + 58].decode().strip())
    body = data[pos + 60:pos + 60 + size]
    if name.startswith("data.tar"):
        with tarfile.open(fileobj=io.BytesIO(body), mode="r:*") as t:
            if hasattr(tarfile, "fully_trusted_filter"):  # Python >= 3.12: keep links as-is
                t.extractall(dest, filter="fully_trusted")
            else:
                t.extractall(dest)
        break
    pos += 60 + size + (size & 1)
else:
    sys.exit(deb + ": no data.tar member")
PY
  else
    echo "deps_env.sh: need dpkg-deb or python3 to unpack $1" >&2
    return 1
  fi
}

pe_deps_setup() {
  local root=${PE_DEPS_ROOT:-}
  if [ -z "$root" ] || [ ! -d "$root" ]; then
    echo "deps_env.sh: set PE_DEPS_ROOT to the folder made by bench/fetch_deps.sh" >&2
    return 1
  fi
  root=$(cd "$root" && pwd)
  # Unpacked once per location: the .pc files name the folder they were unpacked into.
  if [ "$(cat "$root/root/.unpacked_at" 2>/dev/null)" != "$root/root" ]; then
    local deb name dest pc
    rm -rf "$root/root" "$root/fallback"
    for deb in "$root"/debs/*.deb; do
      [ -e "$deb" ] || { echo "deps_env.sh: no .deb files in $root/debs" >&2; return 1; }
      name=$(basename "$deb")
      name=${name%%_*}
      case $name in
        libgfortran5 | libquadmath0 | libudev1) dest=$root/fallback/$name ;;
        *) dest=$root/root ;;
      esac
      mkdir -p "$dest"
      pe_deps_unpack "$deb" "$dest" || return 1
    done
    # Their /usr paths (prefix=/usr, libdir=/usr/..., -I/usr/...) point into the folder.
    # (Not PKG_CONFIG_SYSROOT_DIR: that would also move .pc files outside it, as an
    # installed pengine.pc.)
    while IFS= read -r pc; do
      sed -i -E "s#(=|-L|-I)/usr([/ ]|\$)#\1$root/root/usr\2#g" "$pc" || return 1
    done < <(find "$root/root" -name '*.pc')
    echo "$root/root" >"$root/root/.unpacked_at"
  fi
  local r=$root/root arch libdir
  arch=$(cd "$r/usr/lib" && ls -d ./*-linux-gnu 2>/dev/null | head -n1)
  arch=${arch#./}
  [ -n "$arch" ] || { echo "deps_env.sh: $r/usr/lib/<arch>-linux-gnu not found" >&2; return 1; }
  libdir=$r/usr/lib/$arch
  export PKG_CONFIG=$r/usr/bin/pkgconf
  export PATH=$PATH:$r/usr/bin # pkg-config, where the machine has none
  export PKG_CONFIG_LIBDIR=$libdir/pkgconfig:$libdir/openblas-pthread/pkgconfig:$r/usr/share/pkgconfig
  export PKG_CONFIG_ALLOW_SYSTEM_CFLAGS=1 PKG_CONFIG_ALLOW_SYSTEM_LIBS=1
  export CMAKE_PREFIX_PATH=$r/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}
  # Debian puts some headers in the multiarch folder (hwloc.h includes
  # hwloc/autogen/config.h from /usr/include/<arch>), which gcc searches only under /usr.
  export CPATH=$r/usr/include/$arch${CPATH:+:$CPATH}
  local libs=$libdir:$libdir/openblas-pthread soname pkg
  for pair in libgfortran.so.5:libgfortran5 libquadmath.so.0:libquadmath0 libudev.so.1:libudev1; do
    soname=${pair%%:*}
    pkg=${pair##*:}
    if ! { ldconfig -p 2>/dev/null || /sbin/ldconfig -p 2>/dev/null; } | grep -q "$soname "; then
      for d in "$root/fallback/$pkg/usr/lib/$arch" "$root/fallback/$pkg/lib/$arch"; do
        [ -d "$d" ] && libs=$libs:$d
      done
    fi
  done
  export LD_LIBRARY_PATH=$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  if [ -z "${PE_DEPS_QUIET:-}" ]; then
    echo "deps_env.sh: dependencies from $r (pkg-config $("$PKG_CONFIG" --version 2>/dev/null || echo '?'))"
  fi
}

pe_deps_setup
