import pytest

from nnbench import paths
from nnbench.sweeps import config
from nnbench.sweeps.config import ConfigError


def write(tmp_path, text):
    p = tmp_path / "c.yaml"
    p.write_text(text)
    return p


def test_shipped_config_loads():
    cfg = config.load_gemm(paths.CONFIGS / "gemm.yaml")
    assert len(cfg.cases) >= 8 and (1, 1, 1) in [(s.M, s.N, s.K) for s in cfg.sizes]


@pytest.mark.parametrize("text, where, needles", [
    ("variants:\n  tiled:\n    - {TS: 8}\nsizs: []\n", ":4:", ["unknown key 'sizs'", "variants, sizes"]),
    ("variants:\n  tiledd:\n    - {}\n", ":2:", ["unknown key 'tiledd'", "coarsened"]),
    ("variants:\n  tiled:\n    - {TS: 64}\n", ":3:", ["TS in {8, 16, 32}"]),
    ("variants:\n  coarsened:\n    - {TS: 16,\n       WPT: 32}\n", ":3:", ["TS % WPT == 0"]),
    ("variants:\n  tiled:\n    - {TS: big}\n", ":3:", ["variants.tiled.TS", "expected an integer"]),
    ("variants:\n  tiled:\n    - {TSS: 8}\n", ":3:", ["unknown key 'TSS'", "allowed: TS"]),
    ("sizes:\n  - [1, 2]\n", ":2:", ["expected [M, N, K]"]),
    ("sizes:\n  - [1, 0, 3]\n", ":2:", ["below the minimum 1"]),
    ("variants: [\n", ":", ["not valid YAML"]),
])
def test_errors_name_file_line_key(tmp_path, text, where, needles):
    p = write(tmp_path, text)
    with pytest.raises(ConfigError) as e:
        config.load_gemm(p)
    msg = str(e.value)
    assert msg.startswith(str(p) + where), msg
    for n in needles:
        assert n in msg, msg


def test_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="no such config file"):
        config.load_gemm(tmp_path / "nope.yaml")
