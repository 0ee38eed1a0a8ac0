/*
 * ex_trainer — the training program every model of the examples shares:
 *
 *   mpirun -np 2 build/examples/gpt2/gpt2_train configs/gpt2_demo.cfg [group.key=value ...]
 *
 * A model's main() is one call: ex_train_main(argc, argv, &gpt2_model_ops).
 * The loop is the one of DESIGN.md section 4, the same for every ZeRO stage,
 * both backends and every model: each micro-step the model runs its forward,
 * head and backward over its units (ex_model.h), then zs_step. A training
 * step never makes the host wait for the GPU except inside zs_step (the
 * gradient norm): tokens go up from page-locked memory without waiting, and
 * the loss comes back the same way, read after zs_step. Data: a text file
 * read as bytes or llm.c token shards (ex_data.h); every rank reads its own
 * disjoint samples, the same for any world size at the same global batch,
 * and the position is saved with checkpoints.
 *
 * The generic app keys (the `app` group; defaults in brackets; each model
 * adds its own, see its family file):
 *   seq_len [the model's]  tokens per sequence (T): GPT-2's block_size, at most 2048
 *                         for the Llama family (their contexts reach 131072)
 *   batch_size [8]        sequences per rank per micro-step (B); with global_batch, the
 *                         largest micro-batch a rank may take (its memory cap)
 *   global_batch [0]      sequences per optimizer step, kept at every world size: B and the
 *                         runtime's gradient_accumulation_steps are derived from it and the
 *                         world size (ex_batch.h), so a restart on fewer ranks is the same
 *                         computation; 0 = off (B = batch_size, the configured accumulation)
 *   steps [200]           optimizer steps
 *   train_data ["data/shakespeare/shakespeare.txt"]  text (bytes) or llm.c .bin shards (a glob)
 *   val_data [""]         held-out stream; "" holds out the last val_fraction of train_data
 *   val_fraction [0.05]   data_seed [1337]
 *   val_every [50]        validation every this many steps (and at the end); 0 = only at the end
 *   val_batches [4]       batches of batch_size sequences per rank per validation (with
 *                         global_batch: that many global batches, the same sequences at
 *                         every world size)
 *   log_every [1]         a progress line every this many steps
 *   require_same_kernels [false]  refuse to train when ranks compute with other BLAS kernels
 *                         or GPU models (examples/common/numerics.h)
 *   sample_tokens [256] temperature [0.8] top_k [40] sample_seed [42] prompt ["\n"]
 *   prompt_tokens [""]    a prompt as token ids ("128000 791 6460"), for models whose tokens
 *                         are not bytes (scripts/tokenize_text.py --ids prints them)
 *   target_val_loss [0]   exit 1 unless the final validation loss is at most this (0: off)
 *   beat_unigram [false]  exit 1 unless the final validation loss is below the unigram baseline
 *   save_final [false]    save a checkpoint (into checkpoint.dir) after the last step
 *   loss_log [""]         rank 0 writes "step loss grad_norm lr" per step, as hex floats
 *   memory_file [""]      rank 0 writes every rank's memory per tag in bytes as JSON at the end
 */
#ifndef EX_TRAINER_H
#define EX_TRAINER_H

#include "ex_model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Runs the training program for `model`: returns the process's exit code:
 *   0   trained (and met app.target_val_loss / app.beat_unigram when set)
 *   1   an error, or a target missed (a message on stderr says which)
 *   76  ZS_STOPPED_EXIT_CODE: a stop signal (job.stop_signal, SIGUSR1 by
 *       default, or SIGTERM) was honoured after the runtime committed a
 *       checkpoint; resume with checkpoint.resume = "auto"
 *   78  ZS_TERMINATED_EXIT_CODE: the agreed stop had no checkpoint.dir
 * A collective's deadline ends the job from inside the runtime with
 * ZS_TIMEOUT_EXIT_CODE (75, MPI_Abort), and a second signal ends a rank at
 * once (by the signal); neither returns here. */
int ex_train_main(int argc, char **argv, const ex_model_ops *model);

#ifdef __cplusplus
}
#endif
#endif /* EX_TRAINER_H */
