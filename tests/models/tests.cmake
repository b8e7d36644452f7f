# PyTorch cross-checks of the whole model (needs Debian's python3-torch at /usr/bin/python3).
foreach(arch gpt2 llama)
  foreach(variant "1;0" "2;0.5")
    list(GET variant 0 micro)
    list(GET variant 1 clip)
    set(name models/torch_${arch}_mb${micro}_clip${clip})
    add_test(NAME ${name}
             COMMAND ${CMAKE_CURRENT_LIST_DIR}/torch_check.sh $<TARGET_FILE:dtrain>
                     ${CMAKE_SOURCE_DIR} ${arch} ${micro} ${clip})
    set_tests_properties(${name} PROPERTIES LABELS "models;torch"
                         ENVIRONMENT "OMP_NUM_THREADS=2;OMP_WAIT_POLICY=PASSIVE")
  endforeach()
endforeach()

# The video DiT against an independent PyTorch DiT: one rectified-flow step (output, loss,
# every gradient, the AdamW update), both attention kinds, with labels, torch in fp32 and fp64,
add_executable(models_dit_torch_dump ${CMAKE_CURRENT_LIST_DIR}/dit_torch_dump.c)
target_link_libraries(models_dit_torch_dump PRIVATE dtrain_static)
foreach(attn full spatial_temporal)
  foreach(prec fp32 fp64)
    set(name models/torch_dit_${attn}_${prec})
    add_test(NAME ${name}
             COMMAND ${CMAKE_CURRENT_LIST_DIR}/torch_dit.sh $<TARGET_FILE:models_dit_torch_dump>
                     ${CMAKE_SOURCE_DIR} ${attn} 5 ${prec})
    set_tests_properties(${name} PROPERTIES LABELS "models;torch"
                         ENVIRONMENT "OMP_NUM_THREADS=2;OMP_WAIT_POLICY=PASSIVE")
  endforeach()
endforeach()
# and an unconditional model (no label table: every clip's conditioning is the timestep's)
add_test(NAME models/torch_dit_full_uncond_fp32
         COMMAND ${CMAKE_CURRENT_LIST_DIR}/torch_dit.sh $<TARGET_FILE:models_dit_torch_dump>
                 ${CMAKE_SOURCE_DIR} full 0 fp32)
set_tests_properties(models/torch_dit_full_uncond_fp32 PROPERTIES LABELS "models;torch"
                     ENVIRONMENT "OMP_NUM_THREADS=2;OMP_WAIT_POLICY=PASSIVE")

# The video DiT through the unchanged engine and pipeline executor in every layout np 1/2/4
# allows, against the single process (tests/train/mpi_test_dit_layouts.c, an engine-level test
# registered here beside the DiT's own).
dt_add_mpi_test(train mpi_test_dit_layouts "train;mpi")
# text conditioning (cross-attention in every block): the byte encoder with an unconditional
# model, precomputed embeddings with labels and spatial_temporal attention; a clip with its
# whole text, one with half, one with the null text
foreach(variant "bytes;full;0;6;0" "emb;spatial_temporal;3;5;8")
  list(GET variant 0 kind)
  list(GET variant 1 attn)
  list(GET variant 2 classes)
  list(GET variant 3 tlen)
  list(GET variant 4 tdim)
  foreach(prec fp32 fp64)
    set(name models/torch_dit_text_${kind}_${prec})
    add_test(NAME ${name}
             COMMAND ${CMAKE_CURRENT_LIST_DIR}/torch_dit.sh $<TARGET_FILE:models_dit_torch_dump>
                     ${CMAKE_SOURCE_DIR} ${attn} ${classes} ${prec} ${tlen} ${tdim})
    set_tests_properties(${name} PROPERTIES LABELS "models;torch"
                         ENVIRONMENT "OMP_NUM_THREADS=2;OMP_WAIT_POLICY=PASSIVE")
  endforeach()
endforeach()
