# Bash completion for kiln, the kilnd client.
#
#   source client/completion/kiln.bash      # or copy it to
#   /usr/share/bash-completion/completions/kiln
#
# Completes commands, options (with their values where they have a fixed set:
# --priority, and target names, which are asked of kilnd itself with a short
# timeout through `kiln info`, honouring --addr/-a and KILN_ADDR), MLIR files for
# compile and explain, VMFB files and directories for inspect, scan and recompile,
# directories for compile and recompile -o, JSON and CSV files for --manifest, and
# sub-commands of cache.

_kiln_targets() {
    # The target ids kilnd lists under "ID KIND ..." in `kiln info`.
    local addr_args=()
    local i
    for ((i = 1; i < COMP_CWORD; i++)); do
        case "${COMP_WORDS[i]}" in
            -a|--addr) addr_args=(--addr "${COMP_WORDS[i+1]}") ;;
            --addr=*) addr_args=("${COMP_WORDS[i]}") ;;
        esac
    done
    "${COMP_WORDS[0]}" "${addr_args[@]}" --timeout 2s info 2>/dev/null |
        awk 'found && /^  [^ ]/ { print $1 } /^  ID /{ found = 1 }'
}

# Files ending in one of the given extensions, and directories (no extglob needed).
_kiln_files() {
    local cur="$1" f ext
    shift
    COMPREPLY=()
    while IFS= read -r f; do
        if [[ -d "$f" ]]; then COMPREPLY+=("$f/"); continue; fi
        for ext in "$@"; do
            [[ "$f" == *."$ext" ]] && COMPREPLY+=("$f") && break
        done
    done < <(compgen -f -- "$cur")
    compopt -o nospace 2>/dev/null
}

_kiln() {
    local cur prev words cword
    if declare -F _init_completion >/dev/null; then
        _init_completion -n = || return
    else
        cur="${COMP_WORDS[COMP_CWORD]}"
        prev="${COMP_WORDS[COMP_CWORD-1]}"
        words=("${COMP_WORDS[@]}")
        cword=$COMP_CWORD
    fi

    local commands="compile fetch find status watch cancel explain info health stats inspect scan recompile cache help"
    local global="--addr --timeout --json --config --max-message-bytes --help --version"

    # The command is the first word that is not an option or an option's value.
    local cmd="" i w
    for ((i = 1; i < cword; i++)); do
        w="${words[i]}"
        case "$w" in
            -a|--addr|-t|--timeout|-c|--config|--max-message-bytes|--service|--max-bytes|\
            --target|-o|--output|--flag|--label|--priority|--request-id|--source|--limit|\
            --page-token|--reason|--manifest|--jobs)
                ((i++)) ;;
            -*) ;;
            *) cmd="$w"; break ;;
        esac
    done

    case "$prev" in
        --target)
            # A comma-separated list: complete the name after the last comma.
            local head="" last="$cur"
            if [[ "$cur" == *,* ]]; then head="${cur%,*},"; last="${cur##*,}"; fi
            local t
            COMPREPLY=()
            for t in $(_kiln_targets); do
                [[ "$t" == "$last"* ]] && COMPREPLY+=("$head$t")
            done
            compopt -o nospace 2>/dev/null
            return ;;
        --priority)
            COMPREPLY=($(compgen -W "interactive batch bulk" -- "$cur")); return ;;
        --manifest)
            _kiln_files "$cur" json csv; return ;;
        -o|--output)
            if [[ "$cmd" == compile || "$cmd" == recompile ]]; then
                COMPREPLY=($(compgen -d -- "$cur"))
            else
                COMPREPLY=($(compgen -f -- "$cur"))
            fi
            return ;;
        -c|--config|--source)
            COMPREPLY=($(compgen -f -- "$cur")); return ;;
        -a|--addr|-t|--timeout|--max-message-bytes|--service|--max-bytes|--flag|--label|\
        --request-id|--limit|--page-token|--reason|--jobs)
            return ;;
    esac

    if [[ -z "$cmd" ]]; then
        if [[ "$cur" == -* ]]; then
            COMPREPLY=($(compgen -W "$global" -- "$cur"))
        else
            COMPREPLY=($(compgen -W "$commands" -- "$cur"))
        fi
        return
    fi

    local opts="$global"
    case "$cmd" in
        compile) opts+=" --target --output -o --flag --label --priority --request-id" ;;
        fetch) opts+=" --source --target --flag --output -o" ;;
        find) opts+=" --source --target --label --limit --page-token --all" ;;
        cancel) opts+=" --reason" ;;
        explain) opts+=" --source --target --flag" ;;
        health) opts+=" --service" ;;
        cache) opts+=" --dry-run --max-bytes" ;;
        recompile) opts+=" --output -o --in-place --backup --manifest --jobs --dry-run --force --priority --label" ;;
    esac
    if [[ "$cur" == -* ]]; then
        COMPREPLY=($(compgen -W "$opts" -- "$cur"))
        return
    fi
    case "$cmd" in
        compile|explain) _kiln_files "$cur" mlir mlirbc ;;
        inspect) _kiln_files "$cur" vmfb ;;
        scan|recompile) _kiln_files "$cur" vmfb ;;
        cache)
            COMPREPLY=($(compgen -W "stats verify gc pin unpin" -- "$cur")) ;;
    esac
}

complete -F _kiln kiln
