from msopt.cli import main

main(prog_name="msopt")
