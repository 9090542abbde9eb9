from xagents.ppo.agent import PPO
