"""`agentrl completion bash|zsh|fish`: shell completion scripts, generated from the parser.

Written from the argparse parser itself rather than with a completion library: the core CLI
stays at pydantic and pyyaml, fish is covered (shtab has no fish), and a new subcommand or
flag is completed without anyone touching this file. What cannot be read off the parser
is said here: `-f/--file` and every option whose metavar is PATH, FILE or DIR (`--policy`,
`rehearse --data`, `--model-dir`, `--out`) take a path, completed from the file system; a
positional or option whose action carries `DYNAMIC` names live objects that the script asks
`kubectl` for when it is installed (experiment names, honouring an `-n` already typed;
namespaces; kubeconfig contexts).
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass, field
from typing import Any, Final, TextIO

from agentrl.api.constants import GROUP, PLURAL

SHELLS: Final = ("bash", "zsh", "fish")
DYNAMIC: Final = "agentrl_complete"  # attribute on an argparse action: one of the KINDS
KINDS: Final = ("experiment", "namespace", "context")
FILE_DESTS: Final = frozenset({"file"})
# An option whose metavar says it takes a path is completed with the file system's names too.
PATH_METAVARS: Final = frozenset({"PATH", "FILE", "DIR"})
INSTALL: Final = {
    "bash": "source <(agentrl completion bash)      # in ~/.bashrc",
    "zsh": "source <(agentrl completion zsh)       # in ~/.zshrc, after compinit",
    "fish": "agentrl completion fish > ~/.config/fish/completions/agentrl.fish",
}
_RESOURCE: Final = f"{PLURAL}.{GROUP}"


@dataclass(frozen=True)
class Opt:
    flags: tuple[str, ...]  # empty for a positional
    help: str
    takes_value: bool
    choices: tuple[str, ...] = ()
    kind: str | None = None  # "file" or one of KINDS


@dataclass
class Cmd:
    name: str
    help: str
    options: list[Opt] = field(default_factory=list)
    positionals: list[Opt] = field(default_factory=list)


def mark(action: argparse.Action, kind: str) -> argparse.Action:
    """Say that `action`'s values are live objects of `kind` (completed through kubectl)."""
    assert kind in KINDS, kind
    setattr(action, DYNAMIC, kind)
    return action


def add_parser(sub: Any, root: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "completion",
        help="print a shell completion script (bash, zsh or fish)",
        description="Print a completion script for the agentrl CLI. Install it with:\n  "
        + "\n  ".join(INSTALL.values()),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("shell", choices=SHELLS)

    def run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
        out.write(script(root, args.shell))
        return 0

    p.set_defaults(func=run)


def script(root: argparse.ArgumentParser, shell: str) -> str:
    top, cmds = describe(root)
    return {"bash": _bash, "zsh": _zsh, "fish": _fish}[shell](top, cmds)


def describe(root: argparse.ArgumentParser) -> tuple[list[Opt], list[Cmd]]:
    """The root's own options and every subcommand with its options and positionals."""
    top: list[Opt] = []
    cmds: list[Cmd] = []
    for action in root._actions:  # argparse has no public accessor for these
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            for name, parser in action.choices.items():
                cmd = Cmd(name, helps.get(name, ""))
                for sub_action in parser._actions:
                    opt = _opt(sub_action)
                    (cmd.options if opt.flags else cmd.positionals).append(opt)
                cmds.append(cmd)
        else:
            top.append(_opt(action))
    return top, cmds


def _opt(action: argparse.Action) -> Opt:
    takes_path = action.dest in FILE_DESTS or action.metavar in PATH_METAVARS
    kind = getattr(action, DYNAMIC, None) or ("file" if takes_path else None)
    return Opt(
        flags=tuple(action.option_strings),
        help=_one_line(action.help or ""),
        takes_value=action.nargs != 0,
        choices=tuple(str(c) for c in action.choices or ()),
        kind=kind,
    )


def _one_line(text: str) -> str:
    return re.sub(r"\s+", " ", text.replace("%%", "%")).strip()


def _words(opts: list[Opt]) -> str:
    return " ".join(f for o in opts for f in o.flags)


# ---- bash ------------------------------------------------------------------------------

_BASH_HELPERS = f"""\
_agentrl_kubectl_args() {{
    local i
    for ((i = 1; i < COMP_CWORD; i++)); do
        case "${{COMP_WORDS[i]}}" in
            -n|--namespace|--context)
                printf '%s\\n%s\\n' "${{COMP_WORDS[i]}}" "${{COMP_WORDS[i+1]}}" ;;
        esac
    done
}}
_agentrl_dynamic() {{
    command -v kubectl >/dev/null 2>&1 || return 0
    local -a extra
    local names='jsonpath={{.items[*].metadata.name}}'
    mapfile -t extra < <(_agentrl_kubectl_args)
    case "$1" in
        experiment) kubectl "${{extra[@]}}" get {_RESOURCE} -o "$names" 2>/dev/null ;;
        namespace) kubectl "${{extra[@]}}" get namespaces -o "$names" 2>/dev/null ;;
        context) kubectl config get-contexts -o name 2>/dev/null ;;
    esac
}}
"""


def _bash_values(opt: Opt) -> str:
    if opt.choices:
        return f'COMPREPLY=($(compgen -W "{" ".join(opt.choices)}" -- "$cur"))'
    if opt.kind == "file":
        return 'compopt -o filenames 2>/dev/null; COMPREPLY=($(compgen -f -- "$cur"))'
    if opt.kind in KINDS:
        return f'COMPREPLY=($(compgen -W "$(_agentrl_dynamic {opt.kind})" -- "$cur"))'
    return "COMPREPLY=()"


def _bash(top: list[Opt], cmds: list[Cmd]) -> str:
    lines = [
        "# bash completion for agentrl; generated by `agentrl completion bash`.",
        f"# Install: {INSTALL['bash']}",
        _BASH_HELPERS.rstrip(),
        "_agentrl() {",
        '    local cur="${COMP_WORDS[COMP_CWORD]}" prev="${COMP_WORDS[COMP_CWORD-1]}"',
        "    local cmd='' i",
        "    for ((i = 1; i < COMP_CWORD; i++)); do",
        '        case "${COMP_WORDS[i]}" in -*) ;; *) cmd="${COMP_WORDS[i]}"; break ;; esac',
        "    done",
        '    if [[ -z "$cmd" ]]; then',
        f'        COMPREPLY=($(compgen -W "{" ".join(c.name for c in cmds)} {_words(top)}"'
        ' -- "$cur"))',
        "        return 0",
        "    fi",
        '    case "$cmd" in',
    ]
    for cmd in cmds:
        lines.append(f"        {cmd.name})")
        valued = [o for o in cmd.options if o.takes_value]
        if valued:
            lines.append('            case "$prev" in')
            for opt in valued:
                lines.append(
                    f"                {'|'.join(opt.flags)}) {_bash_values(opt)}; return 0 ;;"
                )
            lines.append("            esac")
        positional = next((p for p in cmd.positionals if p.choices or p.kind), None)
        options = f'COMPREPLY=($(compgen -W "{_words(cmd.options)}" -- "$cur"))'
        if positional is None:
            lines.append(f"            {options} ;;")
        else:
            lines.append(f'            if [[ "$cur" == -* ]]; then {options}; '
                         f"else {_bash_values(positional)}; fi ;;")  # fmt: skip
    lines += ["    esac", "}", "complete -F _agentrl agentrl", ""]
    return "\n".join(lines)


# ---- zsh -------------------------------------------------------------------------------

_ZSH_HELPERS = f"""\
_agentrl_dynamic() {{
    (( $+commands[kubectl] )) || return 1
    local -a extra values
    local i names='jsonpath={{.items[*].metadata.name}}'
    for ((i = 1; i < $#words; i++)); do
        case $words[i] in -n|--namespace|--context) extra+=($words[i] $words[i+1]) ;; esac
    done
    case $1 in
        experiment) values=(${{(z)"$(kubectl $extra get {_RESOURCE} -o $names 2>/dev/null)"}}) ;;
        namespace) values=(${{(z)"$(kubectl $extra get namespaces -o $names 2>/dev/null)"}}) ;;
        context) values=(${{(f)"$(kubectl config get-contexts -o name 2>/dev/null)"}}) ;;
    esac
    compadd -a values
}}
"""


def _zsh_text(text: str) -> str:
    """A description inside `'...[text]'` of an _arguments spec."""
    return text.replace("'", "'\\''").replace("[", "(").replace("]", ")").replace(":", "\\:")


def _zsh_action(opt: Opt) -> str:
    if opt.choices:
        return f"({' '.join(opt.choices)})"
    if opt.kind == "file":
        return "_files"
    if opt.kind in KINDS:
        return f"{{_agentrl_dynamic {opt.kind}}}"
    return " "


def _zsh_spec(opt: Opt) -> str:
    help_text = _zsh_text(opt.help)
    value = f":{opt.flags[-1].lstrip('-')}:{_zsh_action(opt)}" if opt.takes_value else ""
    if len(opt.flags) == 1:
        return f"'{opt.flags[0]}[{help_text}]{value}'"
    exclusive = " ".join(opt.flags)
    return f"'({exclusive})'{{{','.join(opt.flags)}}}'[{help_text}]{value}'"


def _zsh(top: list[Opt], cmds: list[Cmd]) -> str:
    described = " ".join(f"'{c.name}:{_zsh_text(c.help)}'" for c in cmds)
    lines = [
        "#compdef agentrl",
        "# zsh completion for agentrl; generated by `agentrl completion zsh`.",
        f"# Install: {INSTALL['zsh']}, or save as _agentrl in a directory on $fpath",
        _ZSH_HELPERS.rstrip(),
        "_agentrl() {",
        '    local curcontext="$curcontext" state line',
        "    typeset -A opt_args",
        "    _arguments -C \\",
        *(f"        {_zsh_spec(o)} \\" for o in top),
        "        '1:command:->command' \\",
        "        '*::arg:->args'",
        "    case $state in",
        "        command)",
        f"            local -a commands; commands=({described})",
        "            _describe -t commands 'agentrl command' commands ;;",
        "        args)",
        "            case $line[1] in",
    ]
    for cmd in cmds:
        specs = [_zsh_spec(o) for o in cmd.options]
        for i, pos in enumerate(cmd.positionals, start=1):
            message = _zsh_text(pos.help) if pos.help else "value"
            specs.append(f"'{i}:{message}:{_zsh_action(pos)}'")
        lines.append(f"                {cmd.name}) _arguments \\")
        lines += [f"                    {s} \\" for s in specs[:-1]]
        lines.append(f"                    {specs[-1]} ;;")
    lines += [
        "            esac ;;",
        "    esac",
        "}",
        'if [[ "${zsh_eval_context[-1]}" == loadautofunc ]]; then',
        '    _agentrl "$@"',
        "else",
        "    compdef _agentrl agentrl",
        "fi",
        "",
    ]
    return "\n".join(lines)


# ---- fish ------------------------------------------------------------------------------

_FISH_HELPERS = f"""\
function __agentrl_dynamic
    command -q kubectl; or return
    set -l tokens (commandline -opc)
    set -l extra
    set -l names 'jsonpath={{range .items[*]}}{{.metadata.name}}{{"\\n"}}{{end}}'
    for i in (seq (count $tokens))
        if contains -- $tokens[$i] -n --namespace --context; and test $i -lt (count $tokens)
            set extra $extra $tokens[$i] $tokens[(math $i + 1)]
        end
    end
    switch $argv[1]
        case experiment
            kubectl $extra get {_RESOURCE} -o $names 2>/dev/null
        case namespace
            kubectl $extra get namespaces -o $names 2>/dev/null
        case context
            kubectl config get-contexts -o name 2>/dev/null
    end
end
"""


def _fish_text(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _fish_opt(condition: str, opt: Opt) -> str:
    parts = ["complete -c agentrl", f"-n {condition}"]
    for flag in opt.flags:
        parts.append(f"-l {flag[2:]}" if flag.startswith("--") else f"-s {flag[1:]}")
    if opt.takes_value:
        if opt.kind == "file":
            parts.append("-r -F")
        else:
            parts.append("-x")
            if opt.choices:
                parts.append(f"-a {_fish_text(' '.join(opt.choices))}")
            elif opt.kind in KINDS:
                parts.append(f"-a '(__agentrl_dynamic {opt.kind})'")
    parts.append(f"-d {_fish_text(opt.help)}")
    return " ".join(parts)


def _fish(top: list[Opt], cmds: list[Cmd]) -> str:
    lines = [
        "# fish completion for agentrl; generated by `agentrl completion fish`.",
        f"# Install: {INSTALL['fish']}",
        _FISH_HELPERS.rstrip(),
        "complete -c agentrl -f",
    ]
    lines += [_fish_opt("__fish_use_subcommand", o) for o in top]
    for cmd in cmds:
        lines.append(
            f"complete -c agentrl -n __fish_use_subcommand -a {cmd.name} -d {_fish_text(cmd.help)}"
        )
    for cmd in cmds:
        seen = f"'__fish_seen_subcommand_from {cmd.name}'"
        lines += [_fish_opt(seen, o) for o in cmd.options]
        for pos in cmd.positionals:
            if pos.choices:
                values = _fish_text(" ".join(pos.choices))
            elif pos.kind in KINDS:
                values = f"'(__agentrl_dynamic {pos.kind})'"
            else:
                continue
            lines.append(f"complete -c agentrl -n {seen} -a {values} -d {_fish_text(pos.help)}")
    return "\n".join(lines) + "\n"
