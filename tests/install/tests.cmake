# dtrain installed into a temporary prefix, used from outside the tree (pkg-config, CMake
# package), programs under mpirun -np 2. Needs the whole build (it installs every target).
add_test(NAME install/prefix
         COMMAND ${CMAKE_CURRENT_LIST_DIR}/install.sh ${CMAKE_BINARY_DIR} ${CMAKE_SOURCE_DIR}
                 ${PROJECT_VERSION} ${DTRAIN_ABI_VERSION})
set_tests_properties(install/prefix PROPERTIES LABELS "install;mpi" TIMEOUT 600)
