"""Training: the models this project trains for itself, and how it trains them.

    python -m training.train tiny-arith          # the embedded reasoners (training.reasoners;
    python -m training.evaluate tiny-arith       #   weights in training/models/) and their table
    python -m training.value_train --model tiny-arith   # the value head (rewards.value_head)
    python -m training.prm_train --policy tiny-arith    # a PRM (labels: training.prm_labels)

It sits above the plug-ins (it imports problems, verifiers and rewards, none of them imports
it): what a search needs at run time is a scorer's (rewards) or is found through the core's
registries (search.models: the embedded models and their folders, which training.reasoners
registers as a plug-in).
"""
