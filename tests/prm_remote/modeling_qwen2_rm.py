"""Test copy of the structure of Qwen2.5-Math-PRM's modeling_qwen2_rm.py (written here, not
copied): Qwen2ForProcessRewardModel is a Qwen2Model (weights under "model.") with a reward
head "score" = Linear(hidden, hidden), ReLU, Linear(hidden, num_labels) on every position's
last hidden state; forward returns the head's logits [B, T, num_labels] first. The config's
auto_map names it (AutoModel -> modeling_qwen2_rm.Qwen2ForProcessRewardModel), so it loads
only with trust_remote_code=True, as the hub checkpoint does."""

from torch import nn
from transformers import Qwen2Model, Qwen2PreTrainedModel
from transformers.modeling_outputs import TokenClassifierOutput

from .configuration_qwen2_rm import Qwen2RMConfig


class Qwen2ForProcessRewardModel(Qwen2PreTrainedModel):
    config_class = Qwen2RMConfig

    def __init__(self, config):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.model = Qwen2Model(config)
        self.score = nn.Sequential(nn.Linear(config.hidden_size, config.hidden_size), nn.ReLU(),
                                   nn.Linear(config.hidden_size, self.num_labels))
        self.post_init()

    def forward(self, input_ids=None, attention_mask=None, position_ids=None,
                inputs_embeds=None, **kwargs):
        out = self.model(input_ids=input_ids, attention_mask=attention_mask,
                         position_ids=position_ids, inputs_embeds=inputs_embeds)
        return TokenClassifierOutput(logits=self.score(out[0]))
