"""Policy-gradient training of a served student through the recording proxy (`train rl`)."""

from trajforge.train.rl.config import RLConfig
from trajforge.train.rl.loop import RLError, train_rl

__all__ = ["RLConfig", "RLError", "train_rl"]
