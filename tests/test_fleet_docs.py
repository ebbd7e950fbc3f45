"""Every ``python -m pipeline fleet`` command in docs/fleet.md parses with today's options
(the console blocks also run in tests/test_docs_commands.py; the bash blocks, minutes of
simulation, were run as shown when written)."""

import shlex

from conftest import ROOT
from pipeline.cli import build_parser


def doc_commands():
    text = (ROOT / "docs" / "fleet.md").read_text()
    blocks = [block for block in text.split("```")[1::2]
              if block.startswith(("bash\n", "console\n"))]
    commands = []
    for block in blocks:
        kind, body = block.split("\n", 1)
        for line in body.replace("\\\n", " ").splitlines():
            if kind == "bash" and line.strip():
                commands.append(shlex.split(line))
            elif line.startswith("$ "):
                commands.append(shlex.split(line[2:]))
    return commands


def test_fleet_doc_commands_parse():
    commands = doc_commands()
    assert len(commands) >= 4
    parser = build_parser()
    for argv in commands:
        assert argv[:3] == ["python", "-m", "pipeline"] and argv[3] in ("fleet", "plan"), argv
        if "bogus" in argv:                          # the page's bad-input example
            continue
        args = parser.parse_args(argv[3:])
        assert args.command == argv[3]
