from gpuportal.cli import main

main()
