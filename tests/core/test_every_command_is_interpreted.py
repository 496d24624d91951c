"""The query machine's commands have two interpreters, the services (the coordinator's effect
table) and the virtual-time bench loop: each must carry out every `Command` type, or the two
would run different searches."""

import typing

from spex.bench.vtime import BenchConfig
from spex.bench.vtime.loop import _Run
from spex.services.coordinator.handlers import COMMAND_HANDLERS
from spex.shared.core.commands import Command
from spex.shared.core.speculation import algorithm_predictor


def test_the_services_and_the_bench_loop_both_interpret_every_command():
    every = set(typing.get_args(Command))
    assert set(COMMAND_HANDLERS) == every
    assert set(_Run(BenchConfig(questions=1), algorithm_predictor, None).interpreters) == every
