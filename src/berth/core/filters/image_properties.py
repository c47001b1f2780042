"""The image's architecture and hypervisor type must match the host (ImagePropertiesFilter)."""

from __future__ import annotations

from berth.core.filters.base import Context, HostFilter, Mask, Rejection, Workload


class ImagePropertiesFilter(HostFilter):
    name = "image_properties"
    kind = "placement"
    relaxable_by_eviction = False
    implied_by_count = False

    @classmethod
    def applies(cls, work: Workload) -> bool:
        return work.images

    def per_host_limit(self) -> int | None:
        return None

    def _arch(self, ctx: Context) -> Mask:
        want = ctx.request.image.architecture
        if want is None:
            return ctx.table.everyone()
        return ctx.table.arch == ctx.table.arches.get(want)

    def _hypervisor(self, ctx: Context) -> Mask:
        want = ctx.request.image.hypervisor_type
        if want is None:
            return ctx.table.everyone()
        return ctx.table.hypervisor == ctx.table.hypervisors.get(want)

    def mask(self, ctx: Context) -> Mask:
        arch, hypervisor = self._arch(ctx), self._hypervisor(ctx)
        everyone = ctx.table.everyone()
        if arch is everyone or hypervisor is everyone:  # one alone (or none): no new array
            return hypervisor if arch is everyone else arch
        return arch & hypervisor

    def explain(self, ctx: Context, failed: Mask) -> list[tuple[Rejection, Mask]]:
        arch = failed & ~self._arch(ctx)
        image = ctx.request.image
        return [
            (Rejection("architecture_mismatch", f"architecture is not {image.architecture}"), arch),
            (
                Rejection("hypervisor_mismatch", f"hypervisor is not {image.hypervisor_type}"),
                failed & ~arch,
            ),
        ]
