"""The public API: ``fencing.__all__`` is sorted and complete, the error tree has one root."""

from __future__ import annotations

import inspect
import os
import subprocess
import sys

import pytest

import fencing
import fencing.aio
import fencing.errors

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

ERROR_CLASSES = [
    obj
    for name, obj in vars(fencing.errors).items()
    if inspect.isclass(obj) and obj.__module__ == fencing.errors.__name__
]
PUBLIC_ERRORS = [cls for cls in ERROR_CLASSES if not cls.__name__.startswith("_")]

# The documented subclasses every user may catch.
DOCUMENTED_ERRORS = [
    "Fenced",
    "ProducerFenced",
    "OwnershipConflict",
    "StaleGeneration",
    "ProducerBusy",
    "OffsetMismatch",
    "OffsetOutOfRange",
    "DuplicateSequence",
    "OutOfOrderSequence",
    "UnknownProducerId",
    "OutcomeUnknown",
    "LeaseExpired",
    "StateLost",
    "InvalidName",
    "RecordTooLarge",
]


def test_all_is_sorted_and_unique() -> None:
    assert fencing.__all__ == sorted(fencing.__all__)
    assert len(set(fencing.__all__)) == len(fencing.__all__)


@pytest.mark.parametrize("name", fencing.__all__)
def test_every_exported_name_exists(name: str) -> None:
    assert hasattr(fencing, name)


@pytest.mark.parametrize("cls", PUBLIC_ERRORS, ids=lambda c: c.__name__)
def test_every_public_error_is_exported(cls: type) -> None:
    assert cls.__name__ in fencing.__all__
    assert getattr(fencing, cls.__name__) is cls
    assert cls.__name__ in fencing.errors.__all__


def test_errors_module_exports_only_its_public_classes() -> None:
    assert sorted(fencing.errors.__all__) == sorted(cls.__name__ for cls in PUBLIC_ERRORS)


@pytest.mark.parametrize("cls", ERROR_CLASSES, ids=lambda c: c.__name__)
def test_every_error_subclasses_fencing_error(cls: type) -> None:
    assert issubclass(cls, fencing.FencingError)


@pytest.mark.parametrize("name", DOCUMENTED_ERRORS)
def test_documented_errors_exist(name: str) -> None:
    assert issubclass(getattr(fencing, name), fencing.FencingError)


def test_error_tree_relations() -> None:
    assert issubclass(fencing.ProducerFenced, fencing.Fenced)
    assert issubclass(fencing.OutcomeUnknown, fencing.Unavailable)
    assert issubclass(fencing.InvalidName, fencing.InvalidArgument)
    assert issubclass(fencing.InvalidArgument, ValueError)


@pytest.mark.parametrize("cls", PUBLIC_ERRORS, ids=lambda c: c.__name__)
def test_every_error_is_drawn_in_the_tree(cls: type) -> None:
    assert fencing.errors.__doc__ is not None
    assert f" {cls.__name__}" in fencing.errors.__doc__


def test_documented_handle_names_are_exported() -> None:
    for name in ("Client", "AccessMode", "Record", "RecordMetadata", "Grant", "FencingError"):
        assert name in fencing.__all__


def test_the_asyncio_api_exports_the_same_names_as_the_sync_one() -> None:
    assert fencing.aio.__all__ == [n for n in fencing.__all__ if n != "__version__"]
    shared = set(fencing.aio.__all__) - {
        "Client", "Consumer", "Election", "Leadership", "Ownership", "Producer", "Reader", "Topic"
    }  # fmt: skip
    # Errors, records, modes and states are the very same classes in both flavours.
    for name in shared:
        assert getattr(fencing.aio, name) is getattr(fencing, name), name


def test_a_plain_import_loads_no_handle_and_no_optional_dependency() -> None:
    # The handles load with the first one used; pydantic, argparse and the asyncio
    # flavour only where they are used (settings, the CLI, fencing.aio).
    code = (
        "import sys, fencing\n"
        "loaded = [m for m in sys.modules if m.startswith(('fencing._sync', 'fencing._async',"
        " 'fencing._protocol', 'fencing.cli', 'fencing.spark', 'pydantic', 'argparse', "
        "'tenacity'))]\n"
        "assert not loaded, loaded\n"
        "assert fencing.Topic.__module__ == 'fencing._sync.topic'\n"
        "assert 'fencing._sync.topic' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)
