/* dtrain convert: a sharded checkpoint folder to one HuggingFace safetensors file, or such a
 * file to a step-0 sharded checkpoint (train/checkpoint.h). */
#ifndef DT_CLI_CONVERT_CMD_H
#define DT_CLI_CONVERT_CMD_H

int dt_cli_convert(int argc, char **argv);

#endif
