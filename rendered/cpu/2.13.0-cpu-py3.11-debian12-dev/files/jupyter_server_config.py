# imagebuild: JupyterLab in this image requires a token.
# The token is JUPYTER_TOKEN when set, else a random one generated at start (printed in the log with the URL).
# JUPYTER_TOKEN set to an empty value is refused here; the imagebuild_jupyter_guard server extension also refuses to
# start when the final token is empty (e.g. --IdentityProvider.token='' on the command line).
import os

_token = os.environ.get("JUPYTER_TOKEN")
if _token is not None and not _token.strip():
    raise SystemExit("JUPYTER_TOKEN is set but empty: refusing to start without a token (unset it to get a generated one)")

c = get_config()  # noqa: F821  (provided by traitlets when it loads this file)
c.ServerApp.ip = "0.0.0.0"
c.ServerApp.port = 8888
c.ServerApp.open_browser = False
c.ServerApp.root_dir = "/workspace"
