"""`python -m trajforge.demo [OUT_DIR]`."""

from trajforge.demo import main

main()
