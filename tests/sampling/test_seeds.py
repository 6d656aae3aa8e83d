"""The seeding rules (sampling/seeds.py): each stream's first draws are pinned, since a change to any
generator's key list changes every batch drawn from it; and every user draws from the module."""
from pathlib import Path

import numpy as np
import pytest
import torch

from yolo_data import sampling
from yolo_data.augment import pipeline
from yolo_data.loading.collate import QuadCollate
from yolo_data.sampling import seeds
from yolo_data.sampling.sampler import SharedEpoch
from yolo_data.sampling.seeds import epoch_rng, item_rng, quad_rng

# the first two draws of integers(0, 2**63) of each stream, as the package's batches were made with them
PINNED = {
    "epoch_rng(0, 0)": [4114873261249549017, 1707612120220936452],
    "epoch_rng(7, 3, 1)": [693122678489249245, 535757479183573727],
    "epoch_rng(-1, 2)": [2866976703898266602, 5390948140369227514],
    "epoch_rng(2**40 + 5, 1)": [3911647155883986369, 2690030195153301210],
    "item_rng(0, 0, 5)": [8861178045787046401, 1812933078509223565],
    "item_rng(3, 1, 5, attempt=2)": [1032722215479841787, 5100763828398449289],
    "item_rng(3, 1, 5, draw=9)": [4336696094964088317, 2664746836002829738],
    "item_rng(-2, 4, 5, 1, 9)": [6052701110079668946, 4546052786804806541],
    "quad_rng(11, 2, ('a.jpg', 'b.jpg', 'c.png', 'd.jpg'))": [694492119307703802, 2414763085469159150],
}


@pytest.mark.parametrize("call", PINNED)
def test_every_stream_draws_what_it_drew(call):
    generator = eval(call, {"epoch_rng": epoch_rng, "item_rng": item_rng, "quad_rng": quad_rng})
    assert generator.integers(0, 2**63, 2).tolist() == PINNED[call]


def test_the_streams_are_the_key_lists_the_module_states():
    e = seeds.seed_entropy(-3)
    assert e == 2**64 - 3

    def same(g, key):
        return g.integers(0, 2**63, 4).tolist() == np.random.default_rng(key).integers(0, 2**63, 4).tolist()
    assert same(epoch_rng(-3, 2, 1), [e, 2, 1, 0x5A3])
    assert same(item_rng(-3, 2, 7), [e, 2, 7])
    assert same(item_rng(-3, 2, 7, 4), [e, 2, 7, 4])
    assert same(item_rng(-3, 2, 7, draw=5), [e, 2, 7, 0xD5A7, 5])
    assert same(item_rng(-3, 2, 7, 4, 5), [e, 2, 7, 4, 0xD5A7, 5])
    # within a seed and epoch, the sampler's stream is no item's (an attempt never reaches 0x5A3)
    sampler_first = epoch_rng(-3, 2).integers(0, 2**63, 2).tolist()
    assert all(item_rng(-3, 2, 0, a).integers(0, 2**63, 2).tolist() != sampler_first for a in range(9))


@pytest.mark.parametrize("seed,tiled_or_upsampled", [(0, "TUUTTT"), (11, "TTUTTT")])
def test_the_quad_collate_tosses_its_coins_from_quad_rng(seed, tiled_or_upsampled):
    """Six groups of four one-colour 8x8 images: an upsampled group is one colour, a tiled one four."""
    n = 24
    ims = [torch.full((3, 8, 8), k, dtype=torch.uint8) for k in range(n)]
    paths = [f"{k // 4}{'abcd'[k % 4]}.jpg" for k in range(n)]
    batch = [(ims[k], torch.zeros((0, 6)), paths[k], None) for k in range(n)]
    out, _, _, _ = QuadCollate(seed, SharedEpoch(1))(batch)
    assert out.shape == (6, 3, 16, 16)
    assert "".join("U" if out[g].unique().numel() == 1 else "T" for g in range(6)) == tiled_or_upsampled
    assert [quad_rng(seed, 1, paths[4 * g:4 * g + 4]).random() < 0.5 for g in range(6)] == \
        [c == "U" for c in tiled_or_upsampled]


def test_the_seeding_names_import_from_where_they_did():
    assert sampling.check_seed is seeds.check_seed and sampling.seed_entropy is seeds.seed_entropy
    assert sampling.epoch_rng is epoch_rng and sampling.item_rng is item_rng and pipeline.item_rng is item_rng
    with pytest.raises(TypeError, match="seed must be an integer, got the bool True"):
        seeds.check_seed(True)


def test_no_other_module_of_the_package_makes_a_seeded_generator():
    """Every NumPy generator is made in seeds.py, so its docstring states every stream there is."""
    package = Path(seeds.__file__).resolve().parents[1]
    found = [f"{p.relative_to(package)}:{n}" for p in sorted(package.rglob("*.py")) if p.name != "seeds.py"
             for n, line in enumerate(p.read_text().splitlines(), 1)
             if ("default_rng(" in line or "SeedSequence(" in line) and not line.lstrip().startswith("#")]
    assert found == []
