"""The local judge server behind `LLMJudgeRewardWorker`'s embedded default (DESIGN.md, Rewards).

    from rlvr.judge_server import start_judge_server

    handle = start_judge_server(model_dir)          # vLLM if installed, else the transformers server
    worker = LLMJudgeRewardWorker("qa", base_url=handle.url)
    ...
    handle.stop()

`python -m rlvr.judge_server --model DIR --port 0` runs the transformers server in the foreground and prints
its OpenAI base URL (`http://127.0.0.1:PORT/v1`) as the first stdout line (server.py).
"""

from rlvr.judge_server.launcher import JudgeServerError, JudgeServerHandle, start_judge_server, vllm_available

__all__ = ["JudgeServerError", "JudgeServerHandle", "start_judge_server", "vllm_available"]
