# gr_folder_sources(VAR file.c ...): the folder's sources as full paths in
# VAR. The lists in each folder's CMakeLists.txt say what is built; a .c file
# of the folder that no list names is an error here, so a new file is never
# silently left out of the library.
function(gr_folder_sources var)
  file(GLOB present RELATIVE ${CMAKE_CURRENT_SOURCE_DIR} ${CMAKE_CURRENT_SOURCE_DIR}/*.c)
  foreach(f ${present})
    if(NOT f IN_LIST ARGN)
      message(FATAL_ERROR "${CMAKE_CURRENT_SOURCE_DIR}/${f} is not listed in "
                          "${CMAKE_CURRENT_SOURCE_DIR}/CMakeLists.txt: add it to the list there")
    endif()
  endforeach()
  list(TRANSFORM ARGN PREPEND ${CMAKE_CURRENT_SOURCE_DIR}/ OUTPUT_VARIABLE full)
  set(${var} ${full} PARENT_SCOPE)
endfunction()
