"""Calibration of the simulator against published multi-stream figures: the figures, the models, the one method."""
