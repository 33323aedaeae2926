"""Converting the exported ONNX pipeline (models/backends.py) to OpenVINO's IR, in fp32 or with
NNCF's int8 recipes.

- `openvino-int8`: data-free int8 weights (a scale and zero point per weight row); the runner
  quantises each pass's activations as it runs (models/openvino_runner.py).
- `openvino-int8-static`: post-training quantisation of weights and activations, whose scales
  NNCF calibrates on sentences the caller gives (the anchor corpus; never a dev or test set),
  with its transformer recipe (it applies SmoothQuant and fast bias correction). Against
  `openvino-int8` on an AMD EPYC Zen 4 (2 threads, one process alternating the two, load
  1.3-1.7): 1.23-1.35x the texts/s on batches of 16 short texts, 1.47-1.51x on batches of 16
  long ones, single texts 0.91-1.20x; on MiniLM's dev sets Spearman within 0.025 of fp32, mean
  cosine 0.9968 (min 0.972). Without VNNI its products round otherwise: on an AMD Zen 3 (AVX2
  only) the mean cosine read 0.9947, under the parity check's floor, and 0.9949 once attention
  came to be exported eagerly (models/onnx_export.py).
"""

import itertools
import logging
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np

# Enough to settle the activation ranges: 300 one-sentence samples took 12.6 s to calibrate.
CALIBRATION_SENTENCES = 300


def convert_openvino(
    fp32: Path,
    target: Path,
    *,
    int8_weights: bool = False,
    calibration: list[Mapping[str, np.ndarray]] | None = None,
) -> None:
    """Write the IR of the ONNX graph `fp32` to `target`: fp32 weights, int8 weights
    (`int8_weights`), or int8 weights and activations calibrated on `calibration` (the
    tokenizer's arrays of one text each)."""
    import openvino as ov

    # Weights stay fp32 on disk unless int8 is asked for; the runner sets the precision of the
    # rest (models/openvino_runner.py), which the parity check then judges.
    model = ov.convert_model(str(fp32))
    if int8_weights or calibration is not None:
        import nncf

        nncf.set_log_level(logging.ERROR)
        if calibration is not None:
            names = [port.get_any_name() for port in model.inputs]
            samples = [{name: sample[name] for name in names} for sample in calibration]
            model = nncf.quantize(
                model,
                nncf.Dataset(samples),
                model_type=nncf.ModelType.TRANSFORMER,
                preset=nncf.QuantizationPreset.MIXED,
                subset_size=len(samples),
            )
        else:
            # Mean cosine to fp32 0.99941 on 256 Wikipedia sentences.
            model = nncf.compress_weights(model, mode=nncf.CompressWeightsMode.INT8_ASYM)
    ov.save_model(model, str(target), compress_to_fp16=False)


def calibration_samples(
    features: Callable[[list[str]], Mapping[str, np.ndarray]], sentences: Path
) -> list[Mapping[str, np.ndarray]]:
    """The first CALIBRATION_SENTENCES non-empty lines of the file `sentences`, each tokenised
    on its own (as single-text requests arrive) by `features`."""
    with sentences.open(encoding="utf-8") as lines:
        chosen = list(itertools.islice(filter(None, map(str.strip, lines)), CALIBRATION_SENTENCES))
    if not chosen:
        raise ValueError("static int8 needs calibration sentences, and none were given")
    return [features([sentence]) for sentence in chosen]
