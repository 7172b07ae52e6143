import sys

from dllm_lsp.cli import main

sys.exit(main())
