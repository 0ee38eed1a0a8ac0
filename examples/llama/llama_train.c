/*
 * llama_train — trains a Llama-family decoder (Llama 2/3, SmolLM2,
 * TinyLlama, Mistral without a sliding window, Qwen2) through zeroshard,
 * from initialization or from a Hugging Face checkpoint.
 *
 *   mpirun -np 2 build/examples/llama/llama_train configs/llama_demo.cfg [group.key=value ...]
 *
 * The program is the shared trainer (examples/trainer/ex_trainer.h: the
 * loop, data, validation, sampling, checkpoints, reports and their app
 * keys) driving the family's model table (llama_family.c: its units, its
 * math, Hugging Face weights and config, and its own app keys).
 */
#include "ex_trainer.h"

extern const ex_model_ops llama_model_ops;

int main(int argc, char **argv) { return ex_train_main(argc, argv, &llama_model_ops); }
