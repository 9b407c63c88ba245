import pytest

from agent_core.model import KernelTemplate, KerntuneError, Param, ParamSpace, sha256_text
from agent_core.templating.space import check_config, iter_configs, space_from_toml, space_to_toml, valid_configs
from agent_core.templating.workfiles import read_template_files, write_template_files


def make_space(constraints=("BLOCK % 32 == 0", "BLOCK * U <= n")):
    return ParamSpace("row_sum", {
        "BLOCK": Param("BLOCK", [32, 64, 128, 256], 128, "block_size", "#define BLOCK (line 3): block size"),
        "U": Param("U", [1, 2, 4], 1, "unroll", 'pragma "unroll" in loop'),
    }, list(constraints))


def make_template(tmp_path, space=None, launch=None, entry=None):
    src = tmp_path / "row_sum.cu"
    src.write_text("original\n")
    return KernelTemplate("row_sum", str(src), "original\n", "// template KT_BLOCK KT_U\n", space or make_space(),
                          launch=launch, entry=entry)


def test_iter_configs_is_the_product_in_order():
    cfgs = list(iter_configs(make_space()))
    assert len(cfgs) == 12
    assert cfgs[0] == {"BLOCK": 32, "U": 1} and cfgs[1] == {"BLOCK": 32, "U": 2} and cfgs[-1] == {"BLOCK": 256, "U": 4}


def test_check_config_constraints_with_sizes():
    sp = make_space()
    sizes = [{"n": 1000}, {"n": 128}]
    assert check_config(sp, {"BLOCK": 64, "U": 2}, sizes) is None
    why = check_config(sp, {"BLOCK": 256, "U": 1}, sizes)
    assert "BLOCK * U <= n" in why and "size set 2" in why and "n=128" in why
    assert "not in its values" in check_config(sp, {"BLOCK": 48, "U": 1}, sizes)
    assert "no value" in check_config(sp, {"BLOCK": 64}, sizes)
    assert "not a parameter" in check_config(sp, {"BLOCK": 64, "U": 1, "X": 1}, sizes)
    sp2 = make_space(["BLOCK % 64 == 0"])
    assert "'BLOCK % 64 == 0' fails" in check_config(sp2, {"BLOCK": 32, "U": 1}, sizes)
    sp3 = make_space(["n / (BLOCK - 32) > 0"])
    assert "cannot be evaluated" in check_config(sp3, {"BLOCK": 32, "U": 1}, sizes)


def test_valid_configs_and_limit():
    sp = make_space()
    v = valid_configs(sp, [{"n": 1000}, {"n": 256}])
    assert {"BLOCK": 256, "U": 1} in v and {"BLOCK": 128, "U": 4} not in v
    assert all(check_config(sp, c, [{"n": 1000}, {"n": 256}]) is None for c in v)
    assert len(valid_configs(sp, [{"n": 1000}, {"n": 256}], limit=2)) == 2


def test_toml_round_trip(tmp_path):
    t = make_template(tmp_path, launch={"grid": ["rows"], "block": "BLOCK", "smem": "BLOCK * 4"}, entry="row_sum_v")
    text = space_to_toml(t)
    assert text.startswith("# kerntune parameter space")
    sp, meta = space_from_toml(text, "x.space.toml", {"n"})
    assert sp.params == t.space.params and sp.constraints == t.space.constraints and sp.kernel == "row_sum"
    assert meta["launch"] == {"grid": ["rows"], "block": "BLOCK", "smem": "BLOCK * 4"}
    assert meta["entry"] == "row_sum_v" and meta["original_hash"] == sha256_text("original\n")
    assert meta["template"] == "row_sum.row_sum.kt.cu" and meta["origin"] == "structural"
    # quotes and backslashes in `why` survive
    t.space.params["U"].why = 'a "quoted" \\ why'
    assert space_from_toml(space_to_toml(t), None, {"n"})[0].params["U"].why == 'a "quoted" \\ why'


def _bad(text, size_names=None):
    with pytest.raises(KerntuneError) as ei:
        space_from_toml(text, "s.toml", size_names)
    return ei.value


BASE = '''kernel = "k"
constraints = ["BLOCK % 32 == 0"]

[params.BLOCK]
values = [32, 64]
original = 32
'''


def test_space_errors_name_field_and_line():
    e = _bad(BASE.replace("values = [32, 64]", 'values = ["32", 64]'))
    assert e.field_name == "params.BLOCK.values" and e.line == 4 and e.path == "s.toml"
    e = _bad(BASE.replace("values = [32, 64]", "values = []"))
    assert "empty" in e.message and e.line == 4
    e = _bad(BASE.replace("original = 32", "original = 128"))
    assert "not in values" in e.message and "add it" in e.message and e.field_name == "params.BLOCK.values"
    e = _bad(BASE.replace("BLOCK % 32", "BLOK % 32"))
    assert "unknown name 'BLOK'" in e.message and "did you mean BLOCK" in e.message and e.line == 1
    e = _bad(BASE.replace("BLOCK % 32", "BLOCK % rows"), {"n"})
    assert "'rows'" in e.message and e.field_name == "constraints[0]"
    # a size name is fine in a constraint
    assert space_from_toml(BASE.replace("BLOCK % 32", "BLOCK % rows"), None, {"rows"})
    assert space_from_toml(BASE.replace("BLOCK % 32", "BLOCK <= rows"))  # size names unknown: lower case passes
    e = _bad(BASE.replace("original = 32", "original = 32\nstep = 2"))
    assert "unknown key 'step'" in e.message and e.line == 6
    e = _bad(BASE + "[launch]\ngrid = \"n\"\n")
    assert "grid and block" in e.message
    e = _bad(BASE.replace("values = [32, 64]", "values = [32, 64, 32]"))
    assert "repeats 32" in e.message
    e = _bad('kernel = "k"\nconstraints = ["BLOCK % 32 == 0"\n')
    assert "not valid TOML" in e.message and e.line is not None
    e = _bad(BASE.replace('constraints = ["BLOCK % 32 == 0"]', 'constraints = ["BLOCK.x > 1"]'))
    assert e.field_name == "constraints[0]"


def test_template_files_round_trip_and_stale_source(tmp_path):
    t = make_template(tmp_path, launch={"grid": "n", "block": "BLOCK"})
    wd = tmp_path / ".kerntune"
    tpath, spath = write_template_files(t, wd)
    assert tpath.name == "row_sum.row_sum.kt.cu" and spath.name == "row_sum.row_sum.space.toml"
    assert 'source = "row_sum.cu"' in spath.read_text()
    assert read_template_files(wd, t.path, "other", "original\n") is None
    back = read_template_files(wd, t.path, "row_sum", "original\n")
    assert back.text == t.text and back.space.params == t.space.params and back.launch == t.launch
    assert back.original_hash == t.original_hash
    # an edited space file is what is used
    spath.write_text(spath.read_text().replace("values = [32, 64, 128, 256]", "values = [128, 256]"))
    assert read_template_files(wd, t.path, "row_sum", "original\n").space.params["BLOCK"].values == [128, 256]
    with pytest.raises(KerntuneError) as ei:
        read_template_files(wd, t.path, "row_sum", "changed\n")
    assert "changed since it was templatized" in ei.value.message and "templatize" in ei.value.message
    tpath.unlink()
    with pytest.raises(KerntuneError, match="missing"):
        read_template_files(wd, t.path, "row_sum", "original\n")


def test_real_template_files_round_trip(tmp_path):
    from pathlib import Path
    from agent_core.apply import render
    from agent_core.source.cuda_parse import parse_cuda
    from agent_core.templating.templatize import templatize
    src = tmp_path / "row_sum.cu"
    src.write_text((Path(__file__).resolve().parent.parent / "examples" / "row_sum.cu").read_text())
    text = src.read_text()
    t = templatize(parse_cuda(text, str(src)), "row_sum")
    wd = tmp_path / ".kerntune"
    write_template_files(t, wd)
    back = read_template_files(wd, str(src), "row_sum", text)
    assert back.text == t.text and back.space.params == t.space.params and back.sites == t.sites
    assert render(back, {"BLOCK": 256}) == render(t, {"BLOCK": 256})
    # constraints may use the spec's size names (rows, cols); other unknown names are errors
    spath = wd / "row_sum.row_sum.space.toml"
    spath.write_text(spath.read_text().replace('constraints = [', 'constraints = [\n  "BLOCK <= cols",'))
    assert "BLOCK <= cols" in read_template_files(wd, str(src), "row_sum", text).space.constraints
    spath.write_text(spath.read_text().replace('"BLOCK <= cols"', '"BLOCK <= colz"'))
    with pytest.raises(KerntuneError) as ei:
        read_template_files(wd, str(src), "row_sum", text)
    assert "'colz'" in ei.value.message and "did you mean cols" in ei.value.message
    # an edited template file is used as it is (no sites: rendered token by token)
    tpath = wd / "row_sum.row_sum.kt.cu"
    tpath.write_text(tpath.read_text().replace("float acc", "float acc /* edited */"))
    spath.write_text(spath.read_text().replace('"BLOCK <= colz"', '"BLOCK <= cols"'))
    edited = read_template_files(wd, str(src), "row_sum", text)
    assert edited.sites == [] and "/* edited */" in render(edited, {"BLOCK": 64})
