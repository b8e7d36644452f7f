# The layer rules of DESIGN.md and STYLE.md, checked on the include lines.
add_test(NAME layers/includes COMMAND ${CMAKE_CURRENT_LIST_DIR}/check_includes.sh ${CMAKE_SOURCE_DIR}
         ${CMAKE_BINARY_DIR}/include)
set_tests_properties(layers/includes PROPERTIES LABELS "unit;layers")
