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

# The video DiT through the unchanged engine and pipeline executor in every layout np 1/2/4
# allows, against the single process (tests/train/mpi_test_dit_layouts.c, an engine-level test
# registered here beside the DiT's own).
dt_add_mpi_test(train mpi_test_dit_layouts "train;mpi")
