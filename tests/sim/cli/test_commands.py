"""One module per ``dls`` subcommand (``add_parser``, ``run``) and no preset built to parse."""

import argparse

from sim.cli import main as cli
from sim.cli.entry import COMMANDS
from updater.policy.presets import names


def _subparsers(parser):
    return [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)][0]


def test_each_subcommand_is_one_module_with_one_pattern():
    parser = cli.build_parser()
    choices = _subparsers(parser).choices
    for module, name in zip(cli.COMMANDS, COMMANDS):
        assert module.__name__ == f"sim.cli.{name}"
        assert choices[name].get_default("handler") is module.run


def test_parsing_builds_no_policy_and_the_help_builds_each_once(monkeypatch):
    built = []

    def counting(name, **settings):
        built.append(name)
        return make_policy(name, **settings)

    from sim.cli import settings

    make_policy = settings.make_policy
    monkeypatch.setattr(settings, "make_policy", counting)
    parser = cli.build_parser()
    parser.parse_args(["simulate", "--policy", "dynamic"])
    assert built == []
    text = _subparsers(parser).choices["simulate"].format_help()
    assert built == names()
    assert "classes, with their defaults:" in text
    assert _subparsers(parser).choices["simulate"].format_help() == text
    assert built == names()  # the list is built once per parser
