"""The household world generator makes a valid world for every seed and difficulty."""

from trajforge.envs.household import HouseholdEnv, generate_world
from trajforge.envs.household.world import DIFFICULTIES


def test_every_seed_up_to_10000_makes_a_world_with_enough_goal_objects():
    for difficulty in DIFFICULTIES:
        for seed in range(10_001):
            world = generate_world(seed, difficulty)
            assert len(world.layout.by_type[world.goal.obj_type]) >= world.goal.count


def test_worlds_that_used_to_fail_have_a_plan():
    env = HouseholdEnv()
    for seed in (4799, 5228):
        task = env.task_by_id(f"household-d3-{seed}")
        assert task.gold, task.id
