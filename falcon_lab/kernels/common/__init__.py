"""What every op folder shares: the rule configuration, the state, input checks, precision and the Triton
helpers. Nothing here imports an op folder."""
