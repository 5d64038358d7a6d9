/* The op list: one line per op. Each op `NAME` is defined once, as
 * `const gr_op_def gr_op_NAME`, in its family file (the comment above it), and
 * registered by gr_ops_register_all. Adding an op: define it in its family
 * file, add one line here.
 *
 * The ops core defines itself (const, identity and the control-flow
 * primitives, core/base_ops.c) are registered by core; their gradients build
 * ops, so they are here: X(op, gradient function), added by
 * gr_ops_register_all with gr_op_registry_add_gradient. */
#ifndef GR_OP_LIST_H
#define GR_OP_LIST_H

#define GR_OP_LIST(X)                                                                              \
  /* basic.c */                                                                                    \
  X(placeholder)                                                                                   \
  X(no_op)                                                                                         \
  X(identity_n)                                                                                    \
  /* binary.c */                                                                                   \
  X(add)                                                                                           \
  X(sub)                                                                                           \
  X(mul)                                                                                           \
  X(div)                                                                                           \
  X(pow)                                                                                           \
  X(maximum)                                                                                       \
  X(minimum)                                                                                       \
  X(equal)                                                                                         \
  X(not_equal)                                                                                     \
  X(less)                                                                                          \
  X(less_equal)                                                                                    \
  X(greater)                                                                                       \
  X(greater_equal)                                                                                 \
  X(logical_and)                                                                                   \
  X(logical_or)                                                                                    \
  /* unary.c */                                                                                    \
  X(neg)                                                                                           \
  X(abs)                                                                                           \
  X(exp)                                                                                           \
  X(log)                                                                                           \
  X(sqrt)                                                                                          \
  X(square)                                                                                        \
  X(logical_not)                                                                                   \
  X(cast)                                                                                          \
  X(select)                                                                                        \
  X(add_n)                                                                                         \
  /* matmul.c */                                                                                   \
  X(matmul)                                                                                        \
  X(matmul_add)                                                                                    \
  /* reduce.c */                                                                                   \
  X(reduce_sum)                                                                                    \
  X(reduce_mean)                                                                                   \
  X(reduce_max)                                                                                    \
  X(reduce_min)                                                                                    \
  X(reduce_prod)                                                                                   \
  X(argmax)                                                                                        \
  X(argmin)                                                                                        \
  /* array_shape.c */                                                                              \
  X(reshape)                                                                                       \
  X(transpose)                                                                                     \
  X(expand_dims)                                                                                   \
  X(squeeze)                                                                                       \
  X(fingerprint)                                                                                   \
  X(shape)                                                                                         \
  X(size)                                                                                          \
  X(fill)                                                                                          \
  X(zeros_like)                                                                                    \
  X(ones_like)                                                                                     \
  /* collective.c */                                                                               \
  X(collective_all_reduce)                                                                         \
  X(collective_all_reduce_sgd)                                                                     \
  /* assemble.c */                                                                                 \
  X(assemble_buffer)                                                                               \
  X(assemble_put)                                                                                  \
  X(assemble)                                                                                      \
  /* array_index.c */                                                                              \
  X(concat)                                                                                        \
  X(split)                                                                                         \
  X(slice)                                                                                         \
  X(gather)                                                                                        \
  X(one_hot)                                                                                       \
  X(tile)                                                                                          \
  X(pad)                                                                                           \
  /* nn.c */                                                                                       \
  X(relu)                                                                                          \
  X(sigmoid)                                                                                       \
  X(tanh)                                                                                          \
  X(softmax)                                                                                       \
  X(log_softmax)                                                                                   \
  X(bias_add)                                                                                      \
  X(softmax_cross_entropy)                                                                         \
  X(sparse_softmax_cross_entropy)                                                                  \
  /* state.c */                                                                                    \
  X(variable)                                                                                      \
  X(read_value)                                                                                    \
  X(assign)                                                                                        \
  X(assign_add)                                                                                    \
  X(assign_sub)                                                                                    \
  /* random.c */                                                                                   \
  X(random_uniform)                                                                                \
  X(random_normal)                                                                                 \
  X(truncated_normal)                                                                              \
  X(glorot_uniform)                                                                                \
  /* grad_ops.c */                                                                                 \
  X(sum_like)                                                                                      \
  X(broadcast_to_like)                                                                             \
  X(broadcast_like)                                                                                \
  X(reshape_like)                                                                                  \
  X(stop_gradient)                                                                                 \
  X(gather_grad)                                                                                   \
  /* prod_others.c */                                                                              \
  X(prod_others)                                                                                   \
  /* nn_grad.c */                                                                                  \
  X(relu_grad)                                                                                     \
  X(sparse_softmax_cross_entropy_grad)                                                             \
  /* losses.c */                                                                                   \
  X(sigmoid_cross_entropy)                                                                         \
  /* metrics.c */                                                                                  \
  X(in_top_k)                                                                                      \
  X(auc_confusion)                                                                                 \
  X(auc_from_confusion)                                                                            \
  /* optimizers.c */                                                                               \
  X(apply_sgd)                                                                                     \
  X(apply_sgd_matmul)                                                                              \
  X(apply_momentum)                                                                                \
  X(apply_adam)                                                                                    \
  /* data.c */                                                                                     \
  X(read_idx)                                                                                      \
  X(read_npy)                                                                                      \
  X(batch)                                                                                         \
  /* image_folder.c */                                                                             \
  X(image_folder)                                                                                  \
  /* image_input.c */                                                                              \
  X(image_input)                                                                                   \
  /* control_flow.c */                                                                             \
  X(control_trigger)                                                                               \
  /* conv.c */                                                                                     \
  X(conv2d)                                                                                        \
  X(conv2d_backprop_input)                                                                         \
  X(conv2d_backprop_filter)                                                                        \
  X(conv2d_transpose)                                                                              \
  X(_fused_conv2d)                                                                                 \
  /* fused_elementwise.c */                                                                        \
  X(_fused_elementwise)                                                                            \
  /* pool.c */                                                                                     \
  X(max_pool)                                                                                      \
  X(avg_pool)                                                                                      \
  X(max_pool_grad)                                                                                 \
  X(avg_pool_grad)                                                                                 \
  X(max_pool_grad_grad)                                                                            \
  X(global_avg_pool)                                                                               \
  X(flatten)                                                                                       \
  /* batch_norm.c */                                                                               \
  X(batch_norm)                                                                                    \
  X(batch_norm_grad)                                                                               \
  /* moving_average.c */                                                                           \
  X(moving_average_update)                                                                         \
  /* dropout.c */                                                                                  \
  X(dropout)                                                                                       \
  /* image_augment.c */                                                                            \
  X(random_flip_left_right)                                                                        \
  X(random_crop)                                                                                   \
  X(random_brightness)                                                                             \
  X(random_contrast)                                                                               \
  /* image_transform.c */                                                                          \
  X(random_flip)                                                                                   \
  X(random_rotation)                                                                               \
  X(random_zoom)                                                                                   \
  /* stack_ops.c */                                                                                \
  X(stack_push)                                                                                    \
  X(stack_pop)                                                                                     \
  X(stack_size)                                                                                    \
  X(loop_instance)                                                                                 \
  /* queue_ops.c */                                                                                \
  X(fifo_queue)                                                                                    \
  X(queue_enqueue)                                                                                 \
  X(queue_enqueue_many)                                                                            \
  X(queue_dequeue)                                                                                 \
  X(queue_dequeue_many)                                                                            \
  X(queue_close)                                                                                   \
  X(queue_size)                                                                                    \
  /* accumulator.c */                                                                              \
  X(accumulator)                                                                                   \
  X(accumulator_apply_grad)                                                                        \
  X(accumulator_apply_grads)                                                                       \
  X(accumulator_take_grad)                                                                         \
  X(accumulator_set_global_step)                                                                   \
  X(accumulator_num_accumulated)                                                                   \
  X(accumulator_num_dropped)

#define GR_CORE_OP_GRADIENT_LIST(X)                                                                \
  /* basic.c */                                                                                    \
  X(identity, gr_ops_grad_identity)                                                                \
  /* control_flow.c */                                                                             \
  X(switch, gr_ops_grad_switch)                                                                    \
  X(merge, gr_ops_grad_merge)                                                                      \
  X(enter, gr_ops_grad_loop)                                                                       \
  X(exit, gr_ops_grad_loop)                                                                        \
  X(next_iteration, gr_ops_grad_loop)                                                              \
  X(loop_cond, gr_ops_grad_loop)

#endif
