"""``evalstop watch``: a sidecar that reads a training run's own log, decides with the same
``Monitor`` as ``evalstop replay``, keeps the best checkpoint out of the framework's rotation and
stops the run when its rule fires. Needs no server and no change to the training code."""
