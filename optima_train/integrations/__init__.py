"""Optima envs and rewards inside other training and evaluation stacks (TRL, verifiers); each
module imports its library itself, so `import optima_train.integrations` needs none of them."""
