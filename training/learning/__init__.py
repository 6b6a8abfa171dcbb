"""Learning: the networks, what each one learns (tasks, losses), the training loop, and the
recipes and commands that train a model set or add a metric network to one."""
