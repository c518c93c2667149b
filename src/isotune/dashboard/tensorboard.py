"""TensorBoard, the offline twin of the W&B dashboard: the same sections and charts
(:func:`isotune.dashboard.layout.dashboard_sections`) as a custom-scalars layout, and a logger
that writes each key at the step of its axis (:func:`isotune.tracking.metric_keys.axis_of`), as
W&B's ``define_metric`` draws it, since TensorBoard draws every scalar against its step. A
scatter of one summary value per run, and a layer profile drawn against the layer, have no
custom-scalars chart: they are W&B's only.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from lightning.pytorch.loggers import TensorBoardLogger
from tensorboard.compat.proto.summary_pb2 import Summary
from tensorboard.compat.proto.tensor_pb2 import TensorProto
from tensorboard.compat.proto.tensor_shape_pb2 import TensorShapeProto
from tensorboard.plugins.custom_scalar import layout_pb2, metadata

from isotune.dashboard.layout import PROFILE, SCATTER, Chart, Section
from isotune.tracking.metric_keys import STEP, axis_of
from isotune.tracking.run_names import reg_label, run_group


def chart_regex(chart: Chart) -> str:
    """The tag regex of a chart: its pattern, or its keys exactly (TensorBoard matches from the
    start of a tag only, so the end is anchored: ``val/accuracy`` is not ``val/accuracy_best``)."""
    return chart.pattern or "|".join(re.escape(key) for key in chart.y) + "$"


def custom_scalars_layout(sections: Iterable[Section]) -> layout_pb2.Layout:
    """One category per section (optional sections collapsed), one multiline chart per chart;
    a section of scatters or layer profiles only has none."""
    categories = []
    for section in sections:
        charts = [
            layout_pb2.Chart(
                title=chart.title,
                multiline=layout_pb2.MultilineChartContent(tag=[chart_regex(chart)]),
            )
            for chart in section.charts
            if chart.kind not in (SCATTER, PROFILE)
        ]
        if charts:
            categories.append(
                layout_pb2.Category(title=section.name, chart=charts, closed=section.optional)
            )
    return layout_pb2.Layout(category=categories)


def tensorboard_logger(
    save_dir: str, seed: int, **configuration: Any
) -> EpochAxesTensorBoardLogger:
    """The run's logger, writing to ``<save_dir>/tensorboard/<configuration>-seed<seed>``, the
    configuration named as the run's W&B group (:func:`isotune.tracking.wandb_logging.wandb_logger`)
    so TensorBoard's run list says what each run is. The name is one folder: a ``/`` in it (a path
    among the overrides, a name read from a checkpoint) becomes ``_``, so it never writes elsewhere.
    """
    reg, weight = configuration.pop("reg", "none"), configuration.pop("reg_weight", 0.0)
    group = run_group(**configuration, reg=reg_label(reg, weight))
    version = re.sub(r"[/\\]", "_", f"{group}-seed{seed}")
    return EpochAxesTensorBoardLogger(
        save_dir, name="tensorboard", version=version, default_hp_metric=False
    )


class EpochAxesTensorBoardLogger(TensorBoardLogger):
    """Lightning's TensorBoard logger, each key written at the step of its axis (the value of
    that key in the same row; the row's step where the row lacks it), and the dashboard's layout
    written with :meth:`write_layout`."""

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        rows: dict[int | None, dict[str, float]] = {}
        for key, value in metrics.items():
            axis = axis_of(key)
            at = int(metrics[axis]) if axis != STEP and axis in metrics else step
            rows.setdefault(at, {})[key] = value
        for at, row in rows.items():
            super().log_metrics(row, at)

    def write_layout(self, sections: Iterable[Section]) -> None:
        """The custom-scalars layout of ``sections`` into this run's event file (the summary
        ``tensorboard.plugins.custom_scalar.summary.pb`` makes, without its TensorFlow import)."""
        layout = custom_scalars_layout(sections).SerializeToString()
        value = Summary.Value(
            tag=metadata.CONFIG_SUMMARY_TAG,
            metadata=metadata.create_summary_metadata(),
            tensor=TensorProto(
                dtype="DT_STRING", string_val=[layout], tensor_shape=TensorShapeProto()
            ),
        )
        self.experiment._get_file_writer().add_summary(Summary(value=[value]))
