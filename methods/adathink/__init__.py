"""AdaThink-Med: uncertainty-shaped length rewards for GRPO, and a generated diagnosis task.

From the ICML 2026 AdaThink-Med abstract (papers/icml2026-abstracts.txt) and the paper's
public code (shaohao011/AdaThinkMed, ``length_reward_func.py``): the reward shortens
confident correct answers to easy questions and lengthens wrong answers to hard ones,
with difficulty from group accuracy weighted by the rollouts' top-20% token entropy.

Public API:
  reward:  LengthRewardState, init_state, RewardInputs, uncertainty, normalize_log_minmax,
           confidence, difficulty, update_theta, expected_length, update_lengths,
           length_score, repetition_penalty, reward_on_last_token, adathink_reward,
           vanilla_reward, uniform_length_reward, lcpo_reward, shorter_better_reward,
           REWARDS, get_reward
  data:    KnowledgeBase, Case, Task, MCQuestion, make_knowledge_base, follow_chain,
           make_case, make_task, sft_target, answer_only, parse_response,
           is_well_formatted, is_correct, think_length, load_medqa_jsonl, medqa_prompt
"""

from methods.adathink import data
from methods.adathink import reward
from methods.adathink.data import Case
from methods.adathink.data import KnowledgeBase
from methods.adathink.data import MCQuestion
from methods.adathink.data import Task
from methods.adathink.data import answer_only
from methods.adathink.data import follow_chain
from methods.adathink.data import is_correct
from methods.adathink.data import is_well_formatted
from methods.adathink.data import load_medqa_jsonl
from methods.adathink.data import make_case
from methods.adathink.data import make_knowledge_base
from methods.adathink.data import make_task
from methods.adathink.data import medqa_prompt
from methods.adathink.data import parse_response
from methods.adathink.data import sft_target
from methods.adathink.data import think_length
from methods.adathink.reward import REWARDS
from methods.adathink.reward import LengthRewardState
from methods.adathink.reward import RewardInputs
from methods.adathink.reward import adathink_reward
from methods.adathink.reward import confidence
from methods.adathink.reward import difficulty
from methods.adathink.reward import expected_length
from methods.adathink.reward import get_reward
from methods.adathink.reward import init_state
from methods.adathink.reward import lcpo_reward
from methods.adathink.reward import length_score
from methods.adathink.reward import normalize_log_minmax
from methods.adathink.reward import repetition_penalty
from methods.adathink.reward import reward_on_last_token
from methods.adathink.reward import shorter_better_reward
from methods.adathink.reward import uncertainty
from methods.adathink.reward import uniform_length_reward
from methods.adathink.reward import update_lengths
from methods.adathink.reward import update_theta
from methods.adathink.reward import vanilla_reward
