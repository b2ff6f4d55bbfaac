"""``DashboardRenderer``: a live terminal dashboard drawn with ``rich`` (the ``train`` extra)."""

from __future__ import annotations

from typing import Any

from ember.train.metric.base import MetricEntry, Split
from ember.train.renderer.base import EpochReport, MetricsRenderer, TrainingInfo, TrainingProgress, format_eta


class DashboardRenderer(MetricsRenderer):
    """Progress bars for the epochs (with the ETA of the whole fit) and for the
    iterations of the current split, and a table of the metrics (running values of
    the current epoch, last epoch's values of the other split). Finished epochs,
    notes and the summary are printed above the live area and stay in the scrollback.
    """

    def __init__(self, console: Any = None, refresh_per_second: float = 4.0):
        try:
            from rich.console import Console
        except ImportError:
            raise ImportError("ember: the dashboard needs rich: pip install rich (or ember[train])") from None
        self.console = console if console is not None else Console()
        self.refresh_per_second = refresh_per_second
        self.live: Any = None  # a rich.live.Live while running (rich is imported lazily)
        self.values: dict[str, dict[str, str]] = {"train": {}, "valid": {}}
        self.names: list[str] = []

    def start(self, info: TrainingInfo) -> None:
        from rich.live import Live
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.info = info
        self.progress = Progress(
            TextColumn("[bold]{task.description:<6}"),
            BarColumn(bar_width=None),
            MofNCompleteColumn(),
            TextColumn("{task.fields[extra]}"),
            TimeElapsedColumn(),
            console=self.console,
            expand=True,
        )
        done = max(info.start_epoch - 1, 0)
        self.epoch_task = self.progress.add_task("epoch", total=info.num_epochs, completed=done, extra="eta --:--")
        self.iter_task = self.progress.add_task("train", total=max(info.train_iterations, 1), extra="")
        title = f"[bold]{info.model or 'model'}[/] {info.num_params} params on {info.device}"
        self.console.print(title + (f"  artifacts: {info.artifact_dir}" if info.artifact_dir else ""))
        self.live = Live(
            self._render(), console=self.console, refresh_per_second=self.refresh_per_second, transient=True
        )
        self.live.start()

    def _render(self) -> Any:
        from rich.console import Group
        from rich.table import Table

        table = Table(expand=True, show_edge=False, pad_edge=False)
        table.add_column("metric", style="bold")
        table.add_column("train", justify="right")
        table.add_column("valid", justify="right")
        for name in self.names:
            table.add_row(name, self.values["train"].get(name, ""), self.values["valid"].get(name, ""))
        return Group(table, self.progress)

    def update(self, progress: TrainingProgress, entries: list[MetricEntry]) -> None:
        split = progress.split.value
        for e in entries:
            if e.name not in self.names:
                self.names.append(e.name)
            self.values[split][e.name] = e.formatted[len(e.name) + 1 :]
        self.progress.update(
            self.iter_task,
            description=split,
            completed=progress.iteration,
            total=max(progress.num_iterations, 1),
            extra=f"epoch {progress.epoch}",
        )
        fraction = progress.iteration / max(progress.num_iterations, 1)
        epochs_done = progress.epoch - 1 + (fraction if progress.split is Split.TRAIN else 1.0)
        self.progress.update(
            self.epoch_task, completed=min(epochs_done, progress.num_epochs), extra=f"eta {format_eta(progress.eta)}"
        )
        if self.live is not None:
            self.live.update(self._render())

    def epoch_end(self, report: EpochReport) -> None:
        parts = [f"[bold]epoch {report.epoch}/{report.num_epochs}[/] {report.duration:.1f}s"]
        if report.train:
            parts.append("train: " + ", ".join(e.formatted for e in report.train))
        if report.valid:
            parts.append("valid: " + ", ".join(e.formatted for e in report.valid))
        self.console.print(" | ".join(parts))
        self.progress.update(self.epoch_task, completed=report.epoch)

    def message(self, text: str) -> None:
        self.console.print(text, markup=False, highlight=False)

    def end(self, summary: Any | None) -> None:
        self.close()
        if summary is not None:
            self.console.print(str(summary), markup=False, highlight=False)

    def close(self) -> None:
        live, self.live = self.live, None
        if live is not None:
            live.stop()
