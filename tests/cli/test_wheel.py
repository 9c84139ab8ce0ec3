"""The wheel ships the Lua scripts inside the package, and works from a fresh venv.

Builds the wheel from this checkout (no network: ``--no-build-isolation``, hatchling comes
from the running venv), checks what is in it, installs it into a new venv whose only other
packages are the running interpreter's (through a ``.pth`` file, which comes after the
venv's own site-packages, so the wheel's ``fencing`` wins), and claims a resource from there.
"""

from __future__ import annotations

import os
import site
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import redis

from fencing import Client

from ..conftest import EXTERNAL_URL, ServerInfo
from ..support.paths import ROOT

LUA = ROOT / "lua"
# The build and install are slow enough that one server kind is plenty.
ONE_KIND = "external" if EXTERNAL_URL else "redis"

CLAIM_FROM_THE_WHEEL = """
import sys
from pathlib import Path

import fencing
from fencing._lua_loader import lua_dir

venv = Path(sys.argv[1]).resolve()
assert Path(fencing.__file__).resolve().is_relative_to(venv), fencing.__file__
assert Path(str(lua_dir())).resolve().is_relative_to(venv), str(lua_dir())
client = fencing.Client.from_url(sys.argv[2], namespace=sys.argv[3])
owner = client.ownership("wheel", owner_id="from-the-wheel", ttl=30.0)
grant = owner.claim(["orders/0"])["orders/0"]
print(grant.token, grant.generation)
"""


def _run(
    args: list[str], *, cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run a command; on failure, show its output in the assertion."""
    done = subprocess.run(
        args, cwd=cwd, env=env, capture_output=True, text=True, timeout=180, check=False
    )
    assert done.returncode == 0, f"{args} failed:\n{done.stdout}\n{done.stderr}"
    return done


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel built from this checkout."""
    out = tmp_path_factory.mktemp("wheel")
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "--quiet",
            "-w",
            str(out),
            str(ROOT),
        ]
    )
    wheels = list(out.glob("*.whl"))
    assert [w.name.split("-")[0] for w in wheels] == ["redis_fencing"]
    return wheels[0]


def _source_scripts() -> dict[str, Path]:
    """Every Lua file of the checkout, by the name it must have in the wheel."""
    files = [*LUA.glob("*.lua"), *(LUA / "include").glob("*.lua")]
    return {f"fencing/lua/{p.relative_to(LUA).as_posix()}": p for p in files}


@pytest.mark.slow
def test_wheel_ships_the_lua_scripts_and_py_typed(wheel: Path) -> None:
    scripts = _source_scripts()
    assert "fencing/lua/claim-1.lua" in scripts
    assert any(name.startswith("fencing/lua/include/") for name in scripts)
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        shipped = {n for n in names if n.startswith("fencing/lua/") and not n.endswith("/")}
        # Exactly the checkout's scripts, byte for byte: none missing, none stale.
        assert shipped == set(scripts)
        for name, path in scripts.items():
            assert zf.read(name) == path.read_bytes(), name
    assert "fencing/py.typed" in names
    assert "fencing/__init__.py" in names
    modules = {
        f"fencing/{p.relative_to(ROOT / 'fencing').as_posix()}"
        for p in (ROOT / "fencing").rglob("*.py")
    }
    assert modules <= names
    # The checkout's top-level lua/ is not shipped a second time outside the package.
    assert not any(n.startswith("lua/") for n in names)


@pytest.mark.slow
@pytest.mark.parametrize("server", [ONE_KIND], indirect=True)
def test_wheel_installed_in_a_fresh_venv_claims(
    wheel: Path, tmp_path: Path, server: ServerInfo, client: Client, raw: redis.Redis
) -> None:
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    python = venv / "bin" / "python"
    # pip of the running venv installs into the new one: no network, no ensurepip.
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "--no-deps",
            "--no-index",
            "--quiet",
            str(wheel),
        ]
    )
    purelib = _run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]
    ).stdout.strip()
    # The dependencies (redis, pydantic, tenacity...) come from the running interpreter.
    (Path(purelib) / "running_interpreter_deps.pth").write_text(
        "".join(f"{d}\n" for d in site.getsitepackages())
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "FENCING_"))}
    done = _run(
        [str(python), "-I", "-c", CLAIM_FROM_THE_WHEEL, str(venv), server.url, client.namespace],
        cwd=tmp_path,
        env=env,
    )
    assert done.stdout == "1 1\n"
    # What the installed wheel wrote is what the checkout reads.
    row = raw.hgetall(client.keys.ownership("wheel", "orders/0"))
    assert (row[b"label"], row[b"token"], row[b"gen"]) == (b"from-the-wheel", b"1", b"1")
