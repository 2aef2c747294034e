"""Profiling on the CPU: the SASS parser on committed cuobjdump text (the seed's "1 useful in 3"
for the tiled GEMM, and more math per load after coarsening), the roofline math, ncu's CSV, the
profile command without a GPU, and plots written as PNGs of the right size."""

import struct
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from nnbench import paths, workloads
from nnbench.cli import cli
from nnbench.profiling import ncu, sass
from nnbench.profiling.roofline import Roof, position
from nnbench.report import plots

DATA = Path(__file__).parent / "data"
FIGURES = Path(__file__).parent.parent / "docs" / "data" / "figures"  # the data behind the README's figures


def _loop_mix(name: str) -> dict:
    f = sass.parse((DATA / name).read_text())["gemm"]
    return sass.mix(f.body(f.hot_loop()))


def test_tiled_gemm_does_one_useful_instruction_in_three():
    m = _loop_mix("sass_02_tiled_ts32_sm90.txt")
    assert m["FFMA"] == 32  # TS = 32: one FMA per k of the tile
    assert m["LDS"] >= m["FFMA"]  # every FMA needs shared loads of A and B
    assert 2.5 <= 1 / sass.useful_fraction(m) <= 3.5  # the seed's "1 useful in 3"


def test_coarsening_raises_the_math_per_load():
    tiled, coarse = _loop_mix("sass_02_tiled_ts32_sm90.txt"), _loop_mix("sass_03_coarsened_ts32_wpt8_sm90.txt")
    assert coarse["FFMA"] == 8 * 32  # WPT = 8 outputs per thread, 32 k per tile
    per_load = lambda m: m["FFMA"] / (m["LDS"] + m["LDG"])
    assert per_load(coarse) > 2 * per_load(tiled)
    assert sass.useful_fraction(coarse) > sass.useful_fraction(tiled)


def test_labels_predicates_and_nested_loops():
    text = """
        Function : k
        /*0000*/                   MOV R0, RZ ;
.L_x_0:
        /*0010*/                   LDS R2, [R0] ;
.L_x_1:
        /*0020*/                   FFMA R3, R2, R2, R3 ;
        /*0030*/                   FFMA R4, R2, R3, R4 ;
        /*0040*/              @P0 BRA `(.L_x_1) ;
        /*0050*/              @!P1 BRA `(.L_x_0) ;
        /*0060*/                   EXIT ;
.L_x_2:
        /*0070*/                   BRA `(.L_x_2) ;
"""
    f = sass.parse(text)["k"]
    assert f.labels == {".L_x_0": 0x10, ".L_x_1": 0x20, ".L_x_2": 0x70}
    assert sorted(f.loops()) == [(0x10, 0x50), (0x20, 0x40)]
    assert f.hot_loop() == (0x20, 0x40)  # the inner loop, not the one around it
    m = sass.mix(f.body(f.hot_loop()))
    assert (m["FFMA"], m["control"], m["total"]) == (2, 1, 3)
    assert sass.parse("nothing here") == {}
    trap = sass.parse("Function : t\n        /*0000*/  EXIT ;\n.L_x_9:\n        /*0010*/  BRA `(.L_x_9) ;\n")["t"]
    assert trap.loops() == [] and trap.hot_loop() is None  # the trailing self-branch is no loop


def test_roofline_position():
    roof = Roof(50e12, 2.5e12)
    assert roof.ridge == pytest.approx(20.0)
    p = position(flops=2e12, bytes_=1e12, seconds=1.0, roof=roof)  # AI 2: memory-bound
    assert p.bound == "memory" and p.attainable == pytest.approx(5e12) and p.pct_of_roof == pytest.approx(40.0)
    p = position(flops=4096 ** 3 * 2.0, bytes_=3 * 4096 ** 2 * 4.0, seconds=2.9e-3, roof=roof)
    assert p.bound == "compute" and p.attainable == 50e12 and p.pct_of_roof == pytest.approx(94.8, abs=0.1)
    with pytest.raises(ValueError):
        position(0, 1, 1, roof)


def test_ncu_csv_parsing():
    names = ["ID", "Process ID", "Kernel Name", "gpu__time_duration.sum",
             "sm__warps_active.avg.pct_of_peak_sustained_active",
             "smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio",
             "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio"]
    text = "\n".join(["==PROF== Connected to process 1", ",".join(f'"{n}"' for n in names),
                      '"","","","usecond","%","",""', '"0","42","gemm","2,931.10","12.41","0.52","1.75"'])
    m = ncu.parse(text)
    assert m["gpu__time_duration.sum"] == (2931.10, "usecond")
    assert ncu.duration_ms(m) == pytest.approx(2.9311)
    assert ncu.top_stalls(m, 2) == [("long_scoreboard", 1.75), ("barrier", 0.52)]
    assert ncu.parse("no csv here") == {}
    cmd = ncu.command("ncu", "gemm", ["python", "-m", "nnbench"])
    assert "--clock-control" in cmd and cmd[cmd.index("--clock-control") + 1] == "none"
    assert cmd[cmd.index("--launch-skip") + 1] == str(ncu.WARMUP_LAUNCHES)


def test_profile_without_a_gpu_reports_resources(tmp_path):
    res = CliRunner().invoke(cli, ["profile", "gemm", "-v", "coarsened", "--ts", "32", "--wpt", "8", "--backend", "cpu",
                                   "--arch", "sm_90"])
    assert res.exit_code == 0, res.output
    assert "registers" in res.output and "occupancy" in res.output and "no GPU" in res.output
    for args, needle in ((["gemm", "-v", "naive", "--ts", "32"], "naive does not take TS"),
                         (["gemm", "-v", "numpy"], "runs on the host"),
                         (["cnn", "-v", "x"], "choose a workload from gemm, train, conv"),
                         (["conv", "-v", "x"], "unknown conv variant"),
                         (["conv", "-v", "tiled", "--layer", "1,2,x"], "--layer 1,2,x"),
                         (["gemm", "-v", "tiled", "--arch", "hopper", "--backend", "cpu"], "--arch hopper"),
                         (["gemm", "-v", "tiled", "--ncu", "--backend", "cpu"], "--ncu: needs the cuda backend"),
                         (["mlp", "-v", "fused", "--net", "12", "--backend", "cpu"], "--net 12: unknown")):
        r = CliRunner().invoke(cli, ["profile", *args])
        assert r.exit_code == 2 and needle in r.output, (args, r.output)


def _png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", head[16:24])


@pytest.mark.parametrize("kind, csv_path", [("roofline", FIGURES / "ladder_4096.csv"),
                                            ("speedup", DATA / "train_net1_h100.csv"),
                                            ("train", FIGURES / "train_table_h100.csv"),
                                            ("conv", FIGURES / "conv_resnet.csv")])
def test_plots_are_pngs_of_the_right_size(tmp_path, kind, csv_path):
    pytest.importorskip("matplotlib")
    out = tmp_path / f"{kind}.png"
    res = CliRunner().invoke(cli, ["report", str(csv_path), "--plot", kind, "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert out.stat().st_size > 5000
    assert _png_size(out) == (int(plots.SIZE_INCHES[0] * plots.DPI), int(plots.SIZE_INCHES[1] * plots.DPI))


def _legend_entries(ax) -> list[tuple]:
    out = []
    for h in ax.get_legend().legend_handles:
        if hasattr(h, "get_marker"):
            out.append((h.get_color(), h.get_marker(), h.get_fillstyle(), h.get_linestyle()))
        else:
            out.append((tuple(h.get_facecolor()), h.get_hatch()))
    return out


def test_roofline_reads_well(tmp_path):
    """Plain tick labels, a label per point, the ridge and the peak named, no two legend entries alike."""
    pytest.importorskip("matplotlib")
    df = pd.concat([pd.read_csv(FIGURES / n) for n in ("ladder_4096.csv", "ladder_odd.csv")])
    fig = plots.figure(df, "roofline")
    ax = fig.axes[0]
    fig.canvas.draw()
    ticks = [t.get_text() for t in ax.get_xticklabels() + ax.get_yticklabels() if t.get_text()]
    assert ticks and not any("$" in t or "×" in t for t in ticks), ticks
    entries = _legend_entries(ax)
    assert len(entries) == len(set(entries)) == 9 + 2 + 1  # variants, shapes, the roof
    texts = [t.get_text() for t in ax.texts]
    assert sum(t in set(df["variant"]) for t in texts) == len(df)  # every point labelled
    assert any(t.startswith("ridge 20 FLOP/B") for t in texts)
    assert any("66.9 TFLOP/s" in t for t in ax.get_legend_handles_labels()[1])
    # a CPU file records no peak: no roof is listed, and the title says why
    cpu = df.assign(fp32_peak_tflops=float("nan"), dram_peak_gbs=float("nan"))
    ax = plots.figure(cpu, "roofline").axes[0]
    assert not any("peak" in label for label in ax.get_legend_handles_labels()[1]) and "no roof" in ax.get_title()


def test_a_heatmap_per_shape_never_one_picked(tmp_path):
    pytest.importorskip("matplotlib")
    fig = plots.figure(pd.read_csv(FIGURES / "gemm_sweep_h100.csv"), "heatmap")
    titles = {a.get_title() for a in fig.axes if a.get_title()}
    assert {"coarsened · 2048×2048×2048", "coarsened · 4096×4096×4096"} <= titles
    assert len(titles) == 12  # six swept variants at two shapes


def test_no_empty_chart(tmp_path):
    """A figure with nothing to draw is one line and exit 2, and no file."""
    pytest.importorskip("matplotlib")
    for csv_name, kind, needle in (("ladder_odd.csv", "train", "no verified training row"),
                                   ("train_table_h100.csv", "conv", "no verified convolution row"),
                                   ("ladder_4096.csv", "heatmap", "no variant sweeps two parameters"),
                                   ("ci_again.csv", "speedup", "several workloads (conv, gemm, train)")):
        out = tmp_path / f"{kind}.png"
        res = CliRunner().invoke(cli, ["report", str(FIGURES / csv_name), "--plot", kind, "--out", str(out)])
        assert res.exit_code == 2 and needle in res.output and len(res.output.strip().splitlines()) == 1, res.output
        assert not out.exists()
    no_speedup = pd.read_csv(FIGURES / "ladder_4096.csv").assign(speedup=float("nan"), pct_cublas=float("nan"))
    no_speedup.to_csv(tmp_path / "x.csv", index=False)
    res = CliRunner().invoke(cli, ["report", str(tmp_path / "x.csv"), "--plot", "speedup", "--out",
                                   str(tmp_path / "s.png")])
    assert res.exit_code == 2 and "no verified row has a speedup" in res.output and not (tmp_path / "s.png").exists()


def test_report_bad_input(tmp_path):
    res = CliRunner().invoke(cli, ["report", "nope.csv", "--plot", "roofline", "--out", str(tmp_path / "x.png")])
    assert res.exit_code == 2 and "no such file" in res.output
    res = CliRunner().invoke(cli, ["report", str(FIGURES / "ladder_4096.csv"), "--plot", "pie", "--out", "x.png"])
    assert res.exit_code == 2 and "roofline, speedup, heatmap, train, conv" in res.output
    pytest.importorskip("matplotlib")
    df = pd.DataFrame({"a": [1]})
    df.to_csv(tmp_path / "x.csv")
    res = CliRunner().invoke(cli, ["report", str(tmp_path / "x.csv"), "--plot", "heatmap", "--out",
                                   str(tmp_path / "y.png")])
    assert res.exit_code == 2 and "not an nnbench result CSV; missing columns: status" in res.output  # no row is one


def test_tools_are_found_where_the_nvidia_wheels_put_them(tmp_path, monkeypatch):
    bindir = tmp_path / "site" / "nvidia" / "cu13" / "bin"
    bindir.mkdir(parents=True)
    tool = bindir / "cuobjdump"
    tool.write_text("#!/bin/sh\n")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setattr("sys.path", [str(tmp_path / "site")])
    assert sass.find_tool("cuobjdump") is None  # not executable: not a tool
    tool.chmod(0o755)
    assert sass.find_tool("cuobjdump") == str(tool)
    assert sass.find_tool("nvdisasm") is None


def test_profile_prints_the_seeds_one_in_three_from_real_sass():
    """The real SASS path: nvcc's cubin for sm_90 through cuobjdump (the toolkit's, or the `profile`
    extra's wheel). CI installs that extra, so there it must run, not skip."""
    import os
    if sass.cuobjdump() is None:
        assert not os.environ.get("CI"), f"CI installs the profile extra, yet {sass.NOT_FOUND}"
        pytest.skip(f"{sass.NOT_FOUND}: pip install -e '.[profile]'")
    res = CliRunner().invoke(cli, ["profile", "gemm", "-v", "tiled", "--backend", "cpu", "--arch", "sm_90"])
    assert res.exit_code == 0, res.output
    assert "1 in 3.1" in res.output, res.output


def test_profile_a_users_kernel_from_its_config():
    """`profile kernel` takes the variant and problem from the config (a user's kernel is in no registry);
    without --config it is one line; any suite's config serves the same way."""
    cfg = str(paths.ROOT / "examples" / "tiled_gemm" / "tiled_gemm.yaml")
    res = CliRunner().invoke(cli, ["profile", "kernel", "-v", "tiled", "--ts", "16", "--config", cfg, "--problem", "1",
                                   "--backend", "cpu", "--arch", "sm_90"])
    assert res.exit_code == 0, res.output
    assert "gemm_tiled" in res.output and "TS=16" in res.output and "registers" in res.output
    for args, needle in ((["kernel", "-v", "tiled"], "give --config"),
                         (["kernel", "-v", "tiled", "--ts", "64", "--config", cfg], "no case of it"),
                         (["kernel", "-v", "tiled", "--config", cfg, "--problem", "9"], "--problem 9"),
                         (["gemm", "-v", "tiled", "--config", cfg], "runs workload kernel")):
        r = CliRunner().invoke(cli, ["profile", *args, "--backend", "cpu"])
        assert r.exit_code == 2 and needle in r.output, (args, r.output)


def test_ncu_csv_of_step9_on_the_h100():
    """A recorded `nnbench profile gemm -v tf32x3_wgmma --ncu --ncu-csv` (H100, 4096^3, commit f72332e):
    the tensor pipe's share, the wgmma count the tiling implies, the stalls with Hopper's gmma, and the
    table's rows."""
    from rich.console import Console

    from nnbench.profiling.profile import Profile
    from nnbench.report import tables
    m = ncu.parse((paths.ROOT / "tests/data/ncu_step9_h100.csv").read_text())
    assert ncu.tensor_pipe_pct(m) == pytest.approx(72.59)
    # 1024 tiles x 128 k-blocks x 2 consumer warpgroups x 12 wgmmas (4 k8 steps x 3 products), 4 warps each
    assert m["sm__inst_executed_pipe_tensor_op_gmma.sum"][0] == 1024 * 128 * 2 * 12 * 4
    assert ncu.duration_ms(m) == pytest.approx(1.237248)
    stalls = dict(ncu.top_stalls(m, 20))
    assert "gmma" in stalls and [s for s, _ in ncu.top_stalls(m)] == ["barrier", "wait", "long_scoreboard"]
    assert set(ncu.metric_names(hopper=True)) <= set(m)  # every metric asked for came back
    prof = Profile("gemm", workloads.get("gemm", "tf32x3_wgmma"), {}, "sm_90", "H100", [], ncu=m)
    console = Console(record=True, width=200)
    for t in tables.profile_tables(prof):
        console.print(t)
    text = console.export_text()
    assert "tensor pipe active % (HMMA, HGMMA)" in text and "72.59 %" in text and "12,582,912" in text
    assert "stall: barrier" in text and "stall: gmma" not in text  # the top three only
