"""`[tool.dtype-lint]`: where it is found, how presets, the file and the command line combine, which
keys and values are accepted, and which codes are enabled for which file."""

from __future__ import annotations

from pathlib import Path

import pytest

from dtype_lint.core.config import Config, ConfigError, apply_settings, find_pyproject, load_config
from dtype_lint.ecosystems.presets import EXEMPT_FUNCTIONS, PRESETS


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


# --- discovery ---------------------------------------------------------------------------------------


def test_nearest_pyproject_wins(tmp_path: Path):
    outer = write(tmp_path / "repo/pyproject.toml", '[tool.dtype-lint]\nselect = ["DTL001"]\n')
    inner = write(tmp_path / "repo/sub/pkg/pyproject.toml", '[tool.dtype-lint]\nignore = ["DTL9"]\n')
    deep = tmp_path / "repo/sub/pkg/a/b"
    deep.mkdir(parents=True)
    write(deep / "m.py", "")
    assert find_pyproject(deep) == inner
    assert find_pyproject(deep / "m.py") == inner  # a file starts at its directory
    assert find_pyproject(tmp_path / "repo/sub") == outer
    assert find_pyproject(tmp_path / "repo") == outer

    cfg = load_config(deep)
    assert cfg.source == str(inner) and cfg.root == inner.parent
    assert cfg.ignore == ["DTL9"] and cfg.select == ["DTL"]  # not merged with the outer file
    cfg = load_config(tmp_path / "repo/sub")
    assert cfg.source == str(outer) and cfg.root == outer.parent and cfg.select == ["DTL001"]


def test_no_pyproject_means_defaults_rooted_at_start(tmp_path: Path):
    start = tmp_path / "lonely"
    start.mkdir()
    if find_pyproject(start) is not None:  # a pyproject.toml above the temp dir
        pytest.skip("a pyproject.toml exists above the temporary directory")
    cfg = load_config(start)
    assert cfg.source == "defaults" and cfg.root == start.resolve()
    assert cfg.preset == "vllm" and cfg.select == ["DTL"] and cfg.ignore == []
    write(start / "m.py", "")
    assert load_config(start / "m.py").root == start.resolve()


def test_pyproject_without_our_table_gives_defaults(tmp_path: Path):
    p = write(tmp_path / "pyproject.toml", '[project]\nname = "x"\n\n[tool.ruff]\nline-length = 100\n')
    cfg = load_config(tmp_path)
    assert cfg.root == p.parent
    assert (cfg.preset, cfg.select, cfg.ignore, cfg.helper) == ("vllm", ["DTL"], [], "")


def test_explicit_config_file(tmp_path: Path):
    write(tmp_path / "pyproject.toml", '[tool.dtype-lint]\nselect = ["DTL001"]\n')
    plain = write(tmp_path / "conf/lint.toml", 'preset = "generic"\nignore = ["DTL902"]\n')
    cfg = load_config(tmp_path, plain)
    assert (cfg.preset, cfg.ignore, cfg.select) == ("generic", ["DTL902"], ["DTL"])
    assert cfg.root == tmp_path.resolve()  # the files' project, never the settings file's folder
    tabled = write(tmp_path / "conf/other.toml", '[tool.dtype-lint]\npreset = "generic"\n')
    assert load_config(tmp_path, tabled).preset == "generic"
    other_pyproject = write(tmp_path / "elsewhere/pyproject.toml", '[tool.dtype-lint]\nignore = ["DTL0"]\n')
    assert load_config(tmp_path, other_pyproject).ignore == ["DTL0"]


def test_unreadable_toml_is_a_config_error(tmp_path: Path):
    p = write(tmp_path / "pyproject.toml", "[tool.dtype-lint\nselect = 1\n")
    with pytest.raises(ConfigError, match="cannot read configuration") as e:
        load_config(tmp_path)
    assert str(p) in str(e.value)
    with pytest.raises(ConfigError, match="cannot read configuration"):
        load_config(tmp_path, tmp_path / "missing.toml")


# --- presets and layering ---------------------------------------------------------------------------


def test_vllm_preset_is_the_default():
    cfg = Config()
    assert cfg.preset == "vllm"
    assert "vllm.model_executor.layers.linear.LinearBase" in cfg.all_quantizable
    assert "vllm.model_executor.layers.linear.ColumnParallelLinear" in cfg.all_quantizable
    assert "vllm.model_executor.layers.fused_moe.layer.FusedMoE" in cfg.all_quantizable
    assert "vllm.model_executor.layers.quantization.base_config.QuantizeMethodBase" in cfg.all_exempt_classes
    # Embeddings are quantizable (CT WNA16, GGUF: no `.weight`; ModelOpt Q8_0: uint8).
    assert "vllm.model_executor.layers.vocab_parallel_embedding.VocabParallelEmbedding" in cfg.all_quantizable
    assert cfg.all_not_quantizable == []
    assert cfg.all_config_params == ("quant_config",)
    assert cfg.helper_spec == ("vllm.model_executor.layers.quantization.utils.layer_input_dtype", "get_layer_input_dtype")
    assert cfg.template == "vllm"
    assert cfg.exempt_functions == EXEMPT_FUNCTIONS and cfg.fp8_input_default is True


def test_generic_preset(tmp_path: Path):
    write(tmp_path / "pyproject.toml", '[tool.dtype-lint]\npreset = "generic"\nquantizable = ["mypkg.layers.QLinear"]\n')
    cfg = load_config(tmp_path)
    assert cfg.all_quantizable == ["mypkg.layers.QLinear"]
    assert cfg.all_exempt_classes == [] and cfg.all_not_quantizable == []
    assert cfg.helper_spec == ("layer_input_dtype", "get_layer_input_dtype")
    assert cfg.template == "torch"


def test_settings_extend_the_preset_and_override_helper():
    cfg = apply_settings(Config(), {
        "quantizable": ["mypkg.layers.QLinear"],
        "exempt-classes": ["mypkg.quant.Method"],
        "not-quantizable": ["mypkg.layers.Embedding"],
        "helper": "mypkg.utils.dtypes:input_dtype",
        "helper-template": "torch",
        "extend-exempt-functions": ["pack_*"],
        "fp8-input-default": False,
    }, where="test")
    assert cfg.all_quantizable == PRESETS["vllm"]["quantizable"] + ["mypkg.layers.QLinear"]
    assert cfg.all_exempt_classes[-1] == "mypkg.quant.Method"
    assert cfg.all_not_quantizable[-1] == "mypkg.layers.Embedding"
    assert cfg.helper_spec == ("mypkg.utils.dtypes", "input_dtype")
    assert cfg.template == "torch"
    assert cfg.exempt_functions == EXEMPT_FUNCTIONS + ["pack_*"]
    assert cfg.fp8_input_default is False


def test_command_line_overrides_the_file(tmp_path: Path):
    write(tmp_path / "pyproject.toml", '[tool.dtype-lint]\nselect = ["DTL001"]\nignore = ["DTL902"]\npreset = "generic"\n')
    cfg = load_config(tmp_path, overrides={"select": ["DTL9"], "preset": "vllm"})
    assert (cfg.select, cfg.ignore, cfg.preset) == (["DTL9"], ["DTL902"], "vllm")
    with pytest.raises(ConfigError, match="^command line: unknown preset `x`"):
        load_config(tmp_path, overrides={"preset": "x"})


def test_extend_select_adds_to_select():
    cfg = apply_settings(Config(), {"select": ["DTL001"], "extend-select": ["DTL9"]}, where="t")
    assert cfg.select == ["DTL001", "DTL9"]


def test_fingerprint_follows_settings_not_location(tmp_path: Path):
    a = Config(root=tmp_path / "a")
    b = Config(root=tmp_path / "b", source="elsewhere")
    assert a.fingerprint() == b.fingerprint()
    c = apply_settings(Config(), {"ignore": ["DTL902"]}, where="t")
    d = apply_settings(Config(), {"helper": "m:f"}, where="t")
    assert len({a.fingerprint(), c.fingerprint(), d.fingerprint()}) == 3


# --- validation -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "table, message",
    [
        ({"selct": ["DTL"]}, "unknown [tool.dtype-lint] key `selct` (did you mean `select`?)"),
        ({"per_file_ignores": {}}, "(did you mean `per-file-ignores`?)"),
        ({"fp8_input_default": True}, "(did you mean `fp8-input-default`?)"),
        ({"zzzzzz": 1}, "unknown [tool.dtype-lint] key `zzzzzz`"),
        ({"select": "DTL001"}, "`select` must be a list, got str"),
        ({"select": [1]}, "`select` must be a list of strings"),
        ({"select": ["E501"]}, "`select` has `E501`, not a rule code or prefix"),
        ({"ignore": ["dtl001"]}, "`ignore` has `dtl001`"),
        ({"name-heuristics": "yes"}, "`name-heuristics` must be a bool, got str"),
        ({"preset": "ruff"}, "unknown preset `ruff`; choose one of vllm, generic"),
        ({"per-file-ignores": {"tests/*": "DTL001"}}, "per-file-ignores `tests/*` must map to a list of codes"),
        ({"per-file-ignores": {"tests/*": ["W1"]}}, "per-file-ignores `tests/*` must map to a list of codes"),
        ({"quantizable": ["not a.class"]}, "`quantizable` entry `not a.class` is not a dotted class name"),
        ({"exempt-classes": ["a..b"]}, "`exempt-classes` entry `a..b`"),
        ({"helper": "pkg.mod.func"}, "`helper` must look like `package.module:function`, got `pkg.mod.func`"),
        ({"helper": "pkg.mod:"}, "`helper` must look like"),
        ({"helper": "1pkg:f"}, "`helper` must look like"),
        ({"helper-template": "jax"}, "`helper-template` must be `vllm` or `torch`"),
    ],
)
def test_bad_settings_are_rejected(tmp_path: Path, table: dict, message: str):
    with pytest.raises(ConfigError) as e:
        apply_settings(Config(), table, where="pyproject.toml")
    assert str(e.value).startswith("pyproject.toml: ")
    assert message in str(e.value)


def test_bad_key_in_a_file_names_the_file(tmp_path: Path):
    p = write(tmp_path / "pyproject.toml", '[tool.dtype-lint]\nexlude = ["x"]\n')
    with pytest.raises(ConfigError, match=r"unknown \[tool.dtype-lint\] key `exlude` \(did you mean `exclude`\?\)") as e:
        load_config(tmp_path)
    assert str(e.value).startswith(str(p))


def test_every_documented_key_is_accepted():
    table = {
        "preset": "generic", "select": ["DTL"], "ignore": [], "extend-select": ["DTL001"],
        "quantizable": ["a.B"], "exempt-classes": ["a.C"], "not-quantizable": ["a.D"],
        "exempt-functions": ["f"], "extend-exempt-functions": ["g"], "exclude": ["build2"],
        "per-file-ignores": {"x/*": ["DTL001"]}, "name-heuristics": True, "name-patterns": ["*_proj"],
        "helper": "a.b:c", "helper-template": "vllm", "fp8-input-default": False, "cache-dir": ".c",
    }
    cfg = apply_settings(Config(), table, where="t")
    assert cfg.exempt_functions == ["f", "g"] and cfg.cache_dir == ".c" and cfg.name_heuristics


# --- which codes are enabled ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "select, ignore, enabled, disabled",
    [
        (["DTL"], [], ["DTL001", "DTL900", "DTL902"], []),
        (["DTL001"], [], ["DTL001"], ["DTL002", "DTL900", "DTL010"]),
        (["DTL0"], [], ["DTL001", "DTL099"], ["DTL900"]),
        (["DTL"], ["DTL9"], ["DTL001"], ["DTL900", "DTL901", "DTL902"]),
        (["DTL"], ["DTL90"], ["DTL001"], ["DTL901"]),
        (["ALL"], ["DTL902"], ["DTL001", "DTL900"], ["DTL902"]),
        (["DTL001"], ["DTL"], [], ["DTL001"]),  # ignore beats select
        (["DTL"], ["ALL"], [], ["DTL001"]),
        ([], [], [], ["DTL001"]),
    ],
)
def test_select_ignore_prefixes(select, ignore, enabled, disabled):
    cfg = apply_settings(Config(), {"select": select, "ignore": ignore}, where="t")
    for code in enabled:
        assert cfg.enabled(code), code
    for code in disabled:
        assert not cfg.enabled(code), code


def test_per_file_ignores(tmp_path: Path):
    write(tmp_path / "pyproject.toml", """\
[tool.dtype-lint]
[tool.dtype-lint.per-file-ignores]
"tests/*" = ["DTL"]
"pkg/legacy.py" = ["DTL001"]
"**/gen_*.py" = ["DTL9"]
""")
    cfg = load_config(tmp_path)
    root = tmp_path.resolve()
    assert not cfg.enabled("DTL001", str(root / "tests/test_a.py"))
    assert not cfg.enabled("DTL902", str(root / "tests/sub/test_b.py"))  # fnmatch's * crosses /
    assert not cfg.enabled("DTL001", str(root / "pkg/legacy.py"))
    assert cfg.enabled("DTL902", str(root / "pkg/legacy.py"))  # only the listed code
    assert cfg.enabled("DTL001", str(root / "pkg/modern.py"))
    assert not cfg.enabled("DTL900", str(root / "pkg/sub/gen_x.py"))
    assert cfg.enabled("DTL001", str(root / "pkg/sub/gen_x.py"))
    assert cfg.enabled("DTL001")  # no path: the global answer
    # Patterns are relative to the config's directory, whatever the path's spelling.
    assert not cfg.enabled("DTL001", str(tmp_path / "pkg" / ".." / "pkg" / "legacy.py"))


def test_per_file_ignores_match_relative_paths_from_the_root(tmp_path: Path, monkeypatch):
    write(tmp_path / "pyproject.toml", '[tool.dtype-lint.per-file-ignores]\n"pkg/legacy.py" = ["DTL001"]\n')
    cfg = load_config(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert not cfg.enabled("DTL001", "pkg/legacy.py")
    assert not cfg.enabled("DTL001", "./pkg/legacy.py")
    monkeypatch.chdir(tmp_path / "..")
    assert not cfg.enabled("DTL001", f"{tmp_path.name}/pkg/legacy.py")


def test_a_pyproject_without_our_table_does_not_hide_an_outer_one(tmp_path: Path):
    outer = write(tmp_path / "repo/pyproject.toml", '[tool.dtype-lint]\nselect = ["DTL001"]\n')
    write(tmp_path / "repo/sub/pyproject.toml", '[project]\nname = "sub"\n')
    assert find_pyproject(tmp_path / "repo/sub") == outer
    lone = write(tmp_path / "other/pyproject.toml", '[project]\nname = "x"\n')
    assert find_pyproject(tmp_path / "other") == lone
