# Shared by benches/rehearsal.sh and benches/speed.sh (sourced, after
# `cd` to the repository and with WORK set).

# hyperfine, bubblewrap and rsync, installed with apt-get when missing
# (only as root; otherwise name what is missing and stop).
install_bench_tools() {
    local missing=() t
    for t in hyperfine:hyperfine bwrap:bubblewrap rsync:rsync; do
        command -v "${t%%:*}" >/dev/null || missing+=("${t##*:}")
    done
    if ((${#missing[@]})); then
        [ "$(id -u)" = 0 ] || { echo "missing: ${missing[*]} (install them)" >&2; exit 1; }
        apt-get install -y -qq "${missing[@]}" >/dev/null
    fi
}

make_ws() { # N files in directories of 1000, under $WORK, made once
    local n=$1 dir=$WORK/ws-$1
    if [ ! -f "$dir/.complete" ]; then
        rm -rf "$dir"; mkdir -p "$dir"
        python3 - "$dir" "$n" <<'PY'
import os, sys
root, n = sys.argv[1], int(sys.argv[2])
for i in range(n):
    d = os.path.join(root, f"d{i // 1000}")
    if i % 1000 == 0:
        os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, f"f{i % 1000}.txt"), "w") as f:
        f.write(f"file {i}\n")
PY
        # Owned by the unprivileged user so its edits can land in the overlay.
        chown -R nobody:nogroup "$dir"
        touch "$dir/.complete"
    fi
    echo "$dir"
}
