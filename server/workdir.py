"""The files a server's working directory holds (a run's ``cases/NAME/server/``), named once:
written by ``server.manager.start_server``, re-exported by the run's layout
(``loadgen.runformat.layout``) for its readers."""

#: The server's output (stdout and stderr).
VLLM_LOG = "vllm.log"
#: The command it was started with: argv, the environment set, notes on adapted flags.
COMMAND_FILE = "command.json"
#: Its facts once healthy (``server.manager.RunningServer.describe``).
SERVER_FILE = "server.json"
