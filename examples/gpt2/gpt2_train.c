/*
 * gpt2_train — trains GPT-2 through zeroshard: the project's main example.
 *
 *   mpirun -np 2 build/examples/gpt2/gpt2_train configs/gpt2_demo.cfg [group.key=value ...]
 *
 * The program is the shared trainer (examples/trainer/ex_trainer.h: the
 * loop, data, validation, sampling, checkpoints, reports and their app
 * keys) driving GPT-2's model table (gpt2_family.c: its units, its math,
 * llm.c weights, and its own app keys).
 */
#include "ex_trainer.h"

extern const ex_model_ops gpt2_model_ops;

int main(int argc, char **argv) { return ex_train_main(argc, argv, &gpt2_model_ops); }
