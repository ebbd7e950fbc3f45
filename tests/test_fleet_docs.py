"""Every ``python -m pipeline fleet`` command in docs/fleet.md parses with today's options
(they were run as shown when written; running them all here would be a benchmark)."""

import shlex

from conftest import ROOT
from pipeline.cli import build_parser


def doc_commands():
    text = (ROOT / "docs" / "fleet.md").read_text()
    blocks = [block.split("\n", 1)[1] for block in text.split("```")[1::2]
              if block.startswith("bash\n")]
    return [shlex.split(line) for block in blocks
            for line in block.replace("\\\n", " ").splitlines() if line.strip()]


def test_fleet_doc_commands_parse():
    commands = doc_commands()
    assert len(commands) >= 4
    parser = build_parser()
    for argv in commands:
        assert argv[:4] == ["python", "-m", "pipeline", "fleet"], argv
        args = parser.parse_args(argv[3:])
        assert args.command == "fleet"
