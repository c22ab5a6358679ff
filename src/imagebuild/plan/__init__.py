"""Plan: resolved variants x flavors -> ImagePlan rows (tags, parents, rendered Dockerfiles, inputs hashes)."""

from imagebuild.plan.assemble import make_plan, plan_from_variants

__all__ = ["make_plan", "plan_from_variants"]
