"""Files in and out: bounded reading of the files msopt is given (reading), signature inputs from .npz files
(inputs), and the outputs it writes, built aside and moved into place (outputs, output_guard)."""
